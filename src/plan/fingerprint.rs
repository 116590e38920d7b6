//! What a plan was made against, as SHA-256 hashes: the broker (cluster and release) and vhost,
//! the vhost's objects as read, and the spec's compiled objects. `apply --plan` refuses a plan
//! whose fingerprint the broker no longer gives. Pure.
//!
//! Message and consumer counts are left out: they change with every publish, and a plan does
//! not depend on them except for `--prune`'s deletions, which `apply --plan` checks by comparing
//! the steps themselves (and the broker checks again as it deletes).

use ring::digest::{Context, SHA256};
use serde::Serialize;
use serde_json::{Value, json};

use crate::compile::CompiledTopology;
use crate::live::{Live, LiveExchange, LiveQueue};
use crate::policy::AppliedPolicy;

/// Each part on its own, so that a refusal can say which one changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// Of all three below: the one to compare.
    pub combined: String,
    /// The cluster's name, the broker's release and the vhost.
    pub broker: String,
    /// Every exchange, queue (arguments, durability, the policies that apply), binding as read.
    pub live: String,
    /// What the spec compiles to in this vhost, and whether the plan prunes.
    pub spec: String,
}

/// Who was asked: the cluster (as both endpoints named it) and the release of the node written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSeen<'a> {
    pub cluster_name: &'a str,
    pub version: &'a str,
}

pub fn fingerprint(
    broker: &BrokerSeen,
    vhost: &str,
    live: &Live,
    topologies: &[&CompiledTopology],
    prune: bool,
) -> Fingerprint {
    of(broker, vhost, live, spec(topologies, prune))
}

/// The fingerprint, given the spec's part (`spec`), which `apply` hashes while the broker is
/// still being read.
pub fn of(broker: &BrokerSeen, vhost: &str, live: &Live, spec: String) -> Fingerprint {
    let broker = hash(&json!({
        "cluster_name": broker.cluster_name,
        "version": broker.version,
        "vhost": vhost,
    }));
    let live = hash_live(live);
    let combined = hash(&json!([broker, live, spec]));
    Fingerprint { combined, broker, live, spec }
}

/// The spec's part: `{"prune":..,"topologies":[..]}` in canonical form, one topology's JSON at
/// a time (the whole spec as one JSON tree cost more than everything else a no-op apply does).
pub fn spec(topologies: &[&CompiledTopology], prune: bool) -> String {
    streamed(|out| {
        out.0.update(b"{\"prune\":");
        canonical(&json!(prune), out);
        out.0.update(b",\"topologies\":[");
        for (i, t) in topologies.iter().enumerate() {
            if i > 0 {
                out.0.update(b",");
            }
            canonical(&json!({"topology": t.topology, "objects": t.objects}), out);
        }
        out.0.update(b"]}");
    })
}

/// The live state without what changes by itself (counts), in canonical form:
/// `{"bindings":[..],"exchanges":{name:..},"queues":{name:..}}`, maps sorted by name, written
/// one object at a time (the same bytes as one JSON tree of it, without its memory).
fn hash_live(live: &Live) -> String {
    streamed(|out| {
        // A set, in its order; `null` when bindings could not be listed (AMQP only).
        out.0.update(b"{\"bindings\":");
        match &live.bindings {
            None => out.0.update(b"null"),
            Some(bindings) => {
                out.0.update(b"[");
                for (i, b) in bindings.iter().enumerate() {
                    if i > 0 {
                        out.0.update(b",");
                    }
                    canonical(&json!(b), out);
                }
                out.0.update(b"]");
            }
        }
        out.0.update(b",\"exchanges\":");
        let exchanges = live.exchanges.iter().map(|(name, e)| (name.to_string(), e));
        canonical_map(exchanges, out, exchange_value);
        out.0.update(b",\"queues\":");
        let queues = live.queues.iter().map(|(name, q)| (name.to_string(), q));
        canonical_map(queues, out, queue_value);
        out.0.update(b"}");
    })
}

/// What of an exchange the fingerprint covers.
fn exchange_value(e: &LiveExchange) -> Value {
    json!({
        "type": e.kind,
        "durable": e.durable,
        "auto_delete": e.auto_delete,
        "internal": e.internal,
        "arguments": e.arguments,
    })
}

/// What of a queue the fingerprint covers: not its counts.
fn queue_value(q: &LiveQueue) -> Value {
    let policy = |p: &Option<std::sync::Arc<AppliedPolicy>>| {
        p.as_ref().map(|p| json!({"name": p.name, "definition": p.definition}))
    };
    json!({
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "arguments": q.arguments,
        "refused": q.refused,
        "policy": policy(&q.policy),
        "operator_policy": policy(&q.operator_policy),
    })
}

/// One object of a vhost as a saved plan keeps it, so that a plan refused because the vhost's
/// objects changed can name which: the live part of the fingerprint says only that something
/// did. A digest is the first 64 bits of the object's SHA-256, plenty to tell one state of one
/// object from another and a sixth of the size in a plan of 10,000 topologies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "object", rename_all = "snake_case")]
pub enum SeenObject {
    Exchange {
        name: String,
        digest: String,
    },
    Queue {
        name: String,
        digest: String,
    },
    /// A binding is all of it, so its digest is its identity; `shown` names it for people.
    Binding {
        shown: String,
        digest: String,
    },
}

/// What identifies a seen object: an exchange or queue by its name, a binding by its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SeenKey<'a> {
    Exchange(&'a str),
    Queue(&'a str),
    Binding(&'a str),
}

impl SeenObject {
    fn key(&self) -> SeenKey<'_> {
        match self {
            SeenObject::Exchange { name, .. } => SeenKey::Exchange(name),
            SeenObject::Queue { name, .. } => SeenKey::Queue(name),
            SeenObject::Binding { digest, .. } => SeenKey::Binding(digest),
        }
    }

    fn digest(&self) -> &str {
        match self {
            SeenObject::Exchange { digest, .. }
            | SeenObject::Queue { digest, .. }
            | SeenObject::Binding { digest, .. } => digest,
        }
    }

    pub fn kind(&self) -> crate::model::ObjectKind {
        match self {
            SeenObject::Exchange { .. } => crate::model::ObjectKind::Exchange,
            SeenObject::Queue { .. } => crate::model::ObjectKind::Queue,
            SeenObject::Binding { .. } => crate::model::ObjectKind::Binding,
        }
    }

    /// What identifies it in a vhost: its kind and name, or a binding's digest (its display
    /// drops whether the destination is a queue or an exchange; the digest does not).
    pub fn identity(&self) -> (crate::model::ObjectKind, &str) {
        match self {
            SeenObject::Exchange { name, .. } | SeenObject::Queue { name, .. } => (self.kind(), name),
            SeenObject::Binding { digest, .. } => (self.kind(), digest),
        }
    }

    /// Its name, or a binding as `source -> destination ("key")`.
    pub fn shown(&self) -> &str {
        match self {
            SeenObject::Exchange { name, .. } | SeenObject::Queue { name, .. } => name,
            SeenObject::Binding { shown, .. } => shown,
        }
    }
}

/// What identifies a planned object as `SeenObject::identity` identifies a seen one.
pub fn identity(object: &crate::model::Object) -> (crate::model::ObjectKind, String) {
    use crate::model::Object;
    match object {
        Object::Exchange(e) => (object.kind(), e.name.to_string()),
        Object::Queue(q) => (object.kind(), q.name.to_string()),
        Object::Binding(b) => (object.kind(), digest(&json!(b))),
    }
}

/// Every object of the vhost as read, each with its digest.
pub fn objects(live: &Live) -> Vec<SeenObject> {
    let mut seen = Vec::with_capacity(live.exchanges.len() + live.queues.len());
    seen.extend(
        live.exchanges
            .iter()
            .map(|(name, e)| SeenObject::Exchange { name: name.to_string(), digest: digest(&exchange_value(e)) }),
    );
    seen.extend(
        live.queues
            .iter()
            .map(|(name, q)| SeenObject::Queue { name: name.to_string(), digest: digest(&queue_value(q)) }),
    );
    for b in live.bindings.iter().flatten() {
        seen.push(SeenObject::Binding { shown: b.to_string(), digest: digest(&json!(b)) });
    }
    seen
}

/// The first 64 bits of a value's SHA-256, as a seen object's digest.
fn digest(value: &Value) -> String {
    hash(value)["sha256:".len().."sha256:".len() + 16].to_string()
}

/// Whether one of a saved plan's changes (as its file keeps them) removes this object: an
/// unbind of this binding, a `--prune` deletion of this queue.
pub fn removed_by(changes: &[Value], object: &SeenObject) -> bool {
    changes.iter().any(|change| match (change.get("action").and_then(Value::as_str), object) {
        (Some("unbind"), SeenObject::Binding { digest: d, .. }) => {
            change.get("binding").is_some_and(|b| digest(b) == *d)
        }
        (Some("delete"), SeenObject::Queue { name, .. }) => change.get("queue").and_then(Value::as_str) == Some(name),
        _ => false,
    })
}

/// How an object differs between a plan's reading and today's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moved {
    Appeared,
    Disappeared,
    Changed,
}

/// The objects that appeared, disappeared or changed between `then` and `now`, by kind and name.
pub fn moved<'a>(then: &'a [SeenObject], now: &'a [SeenObject]) -> Vec<(Moved, &'a SeenObject)> {
    use std::collections::BTreeMap;
    let index = |objects: &'a [SeenObject]| objects.iter().map(|o| (o.key(), o)).collect::<BTreeMap<_, _>>();
    let (then, now) = (index(then), index(now));
    let mut moved = Vec::new();
    for (key, was) in &then {
        match now.get(key) {
            None => moved.push((Moved::Disappeared, *was)),
            Some(is) if is.digest() != was.digest() => moved.push((Moved::Changed, *is)),
            Some(_) => {}
        }
    }
    moved.extend(now.iter().filter(|(key, _)| !then.contains_key(*key)).map(|(_, is)| (Moved::Appeared, *is)));
    moved.sort_by(|(_, a), (_, b)| (a.kind(), a.shown()).cmp(&(b.kind(), b.shown())));
    moved
}

/// A map's canonical JSON, keys sorted; each value is made when written.
fn canonical_map<'a, V: 'a>(
    entries: impl Iterator<Item = (String, &'a V)>,
    out: &mut Hasher,
    value: impl Fn(&V) -> Value,
) {
    let mut entries: Vec<(String, &V)> = entries.collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out.0.update(b"{");
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.0.update(b",");
        }
        serde_json::to_writer(&mut *out, &k).expect("a string always serialises");
        out.0.update(b":");
        canonical(&value(v), out);
    }
    out.0.update(b"}");
}

fn streamed(write: impl FnOnce(&mut Hasher)) -> String {
    let mut hasher = Hasher(Context::new(&SHA256));
    write(&mut hasher);
    hex(hasher)
}

fn hex(hasher: Hasher) -> String {
    let digest = hasher.0.finish();
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// SHA-256 of the value's canonical JSON: keys sorted, no spaces, whatever order a map kept.
/// Written straight into the hash, never into a buffer of its own.
fn hash(value: &Value) -> String {
    streamed(|out| canonical(value, out))
}

struct Hasher(Context);

impl std::io::Write for Hasher {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn canonical(value: &Value, out: &mut Hasher) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            // Keys are unique: an unstable sort gives the one order.
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.0.update(b"{");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.0.update(b",");
                }
                serde_json::to_writer(&mut *out, k).expect("a string always serialises");
                out.0.update(b":");
                canonical(v, out);
            }
            out.0.update(b"}");
        }
        Value::Array(items) => {
            out.0.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.0.update(b",");
                }
                canonical(v, out);
            }
            out.0.update(b"]");
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a JSON scalar always serialises"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ArgValue, Arguments, Binding};

    const BROKER: BrokerSeen = BrokerSeen { cluster_name: "rabbit@a", version: "4.0.5" };

    fn compiled() -> Vec<CompiledTopology> {
        let spec = crate::spec::from_str("t.toml", "[topology.orders]\ndelays = [\"5s\"]\n")
            .unwrap_or_else(|e| panic!("{}", e.render_plain()));
        spec.compiled
    }

    fn live() -> Live {
        let mut live = Live::empty();
        live.exchanges.insert(
            "orders".into(),
            LiveExchange {
                kind: "direct".into(),
                durable: true,
                auto_delete: false,
                internal: false,
                arguments: Arguments::new(),
            },
        );
        live.queues.insert(
            "orders".into(),
            LiveQueue {
                durable: true,
                arguments: Some(Arguments::from_iter([("x-queue-type", ArgValue::str("quorum"))])),
                messages: Some(3),
                consumers: Some(1),
                ..LiveQueue::default()
            },
        );
        live.bindings.as_mut().unwrap().insert(Binding::to_queue("orders", "orders", "orders"));
        live
    }

    fn of(live: &Live) -> Fingerprint {
        let compiled = compiled();
        let refs: Vec<_> = compiled.iter().collect();
        fingerprint(&BROKER, "/", live, &refs, false)
    }

    #[test]
    fn the_same_state_gives_the_same_fingerprint_and_counts_do_not_count() {
        let before = of(&live());
        assert_eq!(before, of(&live()));
        let mut busier = live();
        let q = busier.queues.get_mut("orders").unwrap();
        q.messages = Some(1000);
        q.consumers = Some(0);
        assert_eq!(of(&busier), before, "traffic does not make a plan stale");
    }

    #[test]
    fn any_change_of_an_object_changes_the_live_part() {
        let before = of(&live());
        let mut changed = live();
        changed.bindings.as_mut().unwrap().insert(Binding::to_queue("orders", "orders", "other"));
        let after = of(&changed);
        assert_ne!(after.live, before.live);
        assert_ne!(after.combined, before.combined);
        assert_eq!((after.broker, after.spec), (before.broker, before.spec));

        let mut changed = live();
        changed.queues.get_mut("orders").unwrap().arguments =
            Some(Arguments::from_iter([("x-queue-type", ArgValue::str("classic"))]));
        assert_ne!(of(&changed).live, before.live);

        let mut changed = live();
        changed.queues.insert("audit".into(), LiveQueue { durable: true, ..LiveQueue::default() });
        assert_ne!(of(&changed).live, before.live);
    }

    #[test]
    fn another_cluster_release_or_vhost_changes_the_broker_part() {
        let compiled = compiled();
        let refs: Vec<_> = compiled.iter().collect();
        let base = fingerprint(&BROKER, "/", &live(), &refs, false);
        let other = BrokerSeen { cluster_name: "rabbit@b", ..BROKER };
        assert_ne!(fingerprint(&other, "/", &live(), &refs, false).broker, base.broker);
        let upgraded = BrokerSeen { version: "4.1.0", ..BROKER };
        assert_ne!(fingerprint(&upgraded, "/", &live(), &refs, false).broker, base.broker);
        assert_ne!(fingerprint(&BROKER, "other", &live(), &refs, false).broker, base.broker);
        assert_ne!(fingerprint(&BROKER, "/", &live(), &refs, true).spec, base.spec, "prune is part of the plan");
    }

    /// A stale plan names what moved: a queue that appeared, a binding that went, an argument
    /// changed; traffic moves nothing.
    #[test]
    fn what_moved_is_named() {
        let then = objects(&live());
        assert!(moved(&then, &objects(&live())).is_empty());
        let mut busier = live();
        busier.queues.get_mut("orders").unwrap().messages = Some(1000);
        assert!(moved(&then, &objects(&busier)).is_empty(), "counts are not a change");

        let mut now = live();
        now.queues.insert("audit".into(), LiveQueue { durable: true, ..LiveQueue::default() });
        now.queues.get_mut("orders").unwrap().arguments = Some(Arguments::new());
        now.bindings = Some(Default::default());
        now.bindings.as_mut().unwrap().insert(Binding::to_queue("orders", "orders", "other"));
        let now = objects(&now);
        let named: Vec<(Moved, &str, &str)> =
            moved(&then, &now).into_iter().map(|(m, o)| (m, o.kind().as_str(), o.shown())).collect();
        assert_eq!(
            named,
            [
                (Moved::Appeared, "queue", "audit"),
                (Moved::Changed, "queue", "orders"),
                (Moved::Disappeared, "binding", "orders -> orders (\"orders\")"),
                (Moved::Appeared, "binding", "orders -> orders (\"other\")"),
            ]
        );
    }

    /// What a plan's own unbind or prune removed is its own doing, found by the change's JSON.
    #[test]
    fn a_plans_own_removals_are_known() {
        let binding = Binding::to_queue("orders.retry", "orders.wait-5s", "2");
        let seen = |live: &Live| objects(live);
        let mut live = Live::empty();
        live.queues.insert("orders.wait-5s".into(), LiveQueue::default());
        live.bindings.as_mut().unwrap().insert(binding.clone());
        let [queue, bound] = <[SeenObject; 2]>::try_from(seen(&live)).unwrap();
        let unbind = serde_json::to_value(crate::plan::Step::Unbind { binding }).unwrap();
        let delete =
            serde_json::to_value(crate::plan::Step::Delete { queue: "orders.wait-5s".into(), broker_checks: true })
                .unwrap();
        assert!(removed_by(std::slice::from_ref(&unbind), &bound));
        assert!(!removed_by(std::slice::from_ref(&unbind), &queue));
        assert!(removed_by(std::slice::from_ref(&delete), &queue));
        assert!(!removed_by(&[delete], &bound));
        let other = serde_json::to_value(crate::plan::Step::Unbind {
            binding: Binding::to_queue("orders.retry", "orders.wait-5s", "3"),
        })
        .unwrap();
        assert!(!removed_by(&[other], &bound), "another binding's unbind");
    }

    /// The fingerprint is a file format: the same state must hash the same way in every hopper
    /// that reads schema version 1. The value is `printf '{"a":null,"b":[1,true,"x"]}' | sha256sum`:
    /// keys sorted, no spaces, whatever order the map was built in.
    #[test]
    fn the_hash_is_stable() {
        assert_eq!(
            hash(&json!({"b": [1, true, "x"], "a": null})),
            "sha256:042d77c6ddf31627fae5e2299009fccac19a2d2bf9909ed5ba98186674b17ec0"
        );
    }
}
