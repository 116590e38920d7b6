//! What a plan was made against, as SHA-256 hashes: the broker (cluster and release) and vhost,
//! the vhost's objects as read, and the spec's compiled objects. `apply --plan` refuses a plan
//! whose fingerprint the broker no longer gives. Pure.
//!
//! Message and consumer counts are left out: they change with every publish, and a plan does
//! not depend on them except for `--prune`'s deletions, which `apply --plan` checks by comparing
//! the steps themselves (and the broker checks again as it deletes).

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::compile::CompiledTopology;
use crate::live::Live;
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
    let policy = |p: &Option<std::sync::Arc<AppliedPolicy>>| {
        p.as_ref().map(|p| json!({"name": p.name, "definition": p.definition}))
    };
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
        canonical_map(exchanges, out, |e| {
            json!({
                "type": e.kind,
                "durable": e.durable,
                "auto_delete": e.auto_delete,
                "internal": e.internal,
                "arguments": e.arguments,
            })
        });
        out.0.update(b",\"queues\":");
        let queues = live.queues.iter().map(|(name, q)| (name.to_string(), q));
        canonical_map(queues, out, |q| {
            json!({
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": q.arguments,
                "refused": q.refused,
                "policy": policy(&q.policy),
                "operator_policy": policy(&q.operator_policy),
            })
        });
        out.0.update(b"}");
    })
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
    let mut hasher = Hasher(Sha256::new());
    write(&mut hasher);
    hex(hasher)
}

fn hex(hasher: Hasher) -> String {
    let digest = hasher.0.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// SHA-256 of the value's canonical JSON: keys sorted, no spaces, whatever order a map kept.
/// Written straight into the hash, never into a buffer of its own.
fn hash(value: &Value) -> String {
    streamed(|out| canonical(value, out))
}

struct Hasher(Sha256);

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
    use crate::live::{LiveExchange, LiveQueue};
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
