//! The lookups a plan makes for every object, built once per plan. A vhost of 10,000 topologies
//! has 50,000 queues and 70,000 bindings; asking every topology, or every queue, about each of
//! them was quadratic: with every topology's delays changed, planning 10,000 topologies had not
//! finished after five minutes.

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use crate::compile::CompiledTopology;
use crate::live::Live;
use crate::model::{ArgValue, Binding, QueueName, arg};

/// The spec's side of the index: built with the spec, before the broker has answered.
pub struct Owners<'a> {
    topologies: &'a [&'a CompiledTopology],
    /// Each queue the spec declares, by name: the first topology that compiles it.
    queue_owner: FxHashMap<&'a str, usize>,
    generators: Generators<'a>,
    /// Topologies by the exchanges whose bindings they move: their own, retry and dead-letter
    /// exchanges.
    exchange: FxHashMap<&'a str, Vec<&'a CompiledTopology>>,
}

impl<'a> Owners<'a> {
    pub fn new(topologies: &'a [&'a CompiledTopology]) -> Owners<'a> {
        let mut owners = Owners {
            topologies,
            queue_owner: FxHashMap::default(),
            generators: Generators::new(topologies),
            exchange: FxHashMap::default(),
        };
        for (i, c) in topologies.iter().enumerate() {
            for q in c.queues() {
                owners.queue_owner.entry(q.name.as_str()).or_insert(i);
            }
            let t = &c.topology;
            for e in [&t.exchange, &t.retry_exchange, &t.dead_letter_exchange] {
                let exchange_owners = owners.exchange.entry(e.as_str()).or_default();
                if !exchange_owners.last().is_some_and(|last| std::ptr::eq(*last, *c)) {
                    exchange_owners.push(c);
                }
            }
        }
        owners
    }

    pub fn generators(&self) -> &Generators<'a> {
        &self.generators
    }
}

pub struct Index<'a> {
    owners: &'a Owners<'a>,
    live: &'a Live,
    /// Live queues by where their dead letters go (exchange, routing key), in name order. Made
    /// when first asked, as `bindings` is: a vhost in sync asks neither, and made at once they
    /// were 0.8 ms of a 500-topology plan after the broker's last answer (RabbitMQ 4.3).
    dead_letters: OnceLock<FxHashMap<&'a str, FxHashMap<&'a str, Vec<&'a QueueName>>>>,
    /// Live bindings by their source exchange.
    bindings: OnceLock<FxHashMap<&'a str, Vec<&'a Binding>>>,
    /// Whether the vhost has a queue named as a migration's holding queue.
    holding_queues: bool,
}

impl<'a> Index<'a> {
    pub fn new(owners: &'a Owners<'a>, live: &'a Live) -> Index<'a> {
        let holding_queues = live
            .queues
            .range::<str, _>((std::ops::Bound::Included(super::migrate::HOLDING_PREFIX), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|(name, _)| name.starts_with(super::migrate::HOLDING_PREFIX));
        Index { owners, live, dead_letters: OnceLock::new(), bindings: OnceLock::new(), holding_queues }
    }

    /// Whether any queue of the vhost may hold an interrupted migration's messages.
    pub fn holding_queues(&self) -> bool {
        self.holding_queues
    }

    /// The topology that declares the queue `name`, as a slice of it (or of none).
    pub fn owner_of_queue(&self, name: &str) -> &'a [&'a CompiledTopology] {
        match self.owners.queue_owner.get(name) {
            Some(&i) => std::slice::from_ref(&self.owners.topologies[i]),
            None => &[],
        }
    }

    /// The topologies that may have generated the queue name `name`, in spec order.
    pub fn generating(&self, name: &str) -> impl Iterator<Item = &'a CompiledTopology> + use<'a> {
        self.owners.generators.generating(name)
    }

    /// The topologies one of whose exchanges (own, retry, dead-letter) is `exchange`, in spec
    /// order.
    pub fn moving_bindings_of(&self, exchange: &str) -> &[&'a CompiledTopology] {
        self.owners.exchange.get(exchange).map_or(&[], Vec::as_slice)
    }

    /// The live queues that dead-letter through `exchange` with routing key `key`, by name.
    pub fn dead_lettering_to(&self, exchange: &str, key: &str) -> &[&'a QueueName] {
        let dead_letters = self.dead_letters.get_or_init(|| {
            let mut dead_letters: FxHashMap<&str, FxHashMap<&str, Vec<&QueueName>>> = FxHashMap::default();
            for (name, q) in &self.live.queues {
                let Some(args) = &q.arguments else { continue };
                let text = |key| args.get(key).and_then(ArgValue::as_str);
                if let (Some(exchange), Some(key)) =
                    (text(arg::DEAD_LETTER_EXCHANGE), text(arg::DEAD_LETTER_ROUTING_KEY))
                {
                    dead_letters.entry(exchange).or_default().entry(key).or_default().push(name);
                }
            }
            dead_letters
        });
        dead_letters.get(exchange).and_then(|by_key| by_key.get(key)).map_or(&[], Vec::as_slice)
    }

    /// The live bindings from `exchange`.
    pub fn bound_from(&self, exchange: &str) -> &[&'a Binding] {
        let bindings = self.bindings.get_or_init(|| {
            let mut bindings: FxHashMap<&str, Vec<&Binding>> = FxHashMap::default();
            for b in self.live.bindings.iter().flatten() {
                bindings.entry(b.source.as_str()).or_default().push(b);
            }
            bindings
        });
        bindings.get(exchange).map_or(&[], Vec::as_slice)
    }
}

/// The part of an index that needs only the spec: which topologies may have generated a name.
pub struct Generators<'a> {
    topologies: &'a [&'a CompiledTopology],
    /// Topologies by their main queue's name: a name one generates is `<main queue>.<suffix>`.
    main_queue: FxHashMap<&'a str, Vec<usize>>,
}

impl<'a> Generators<'a> {
    pub fn new(topologies: &'a [&'a CompiledTopology]) -> Generators<'a> {
        let mut main_queue: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
        for (i, c) in topologies.iter().enumerate() {
            main_queue.entry(c.topology.queue.as_str()).or_default().push(i);
        }
        Generators { topologies, main_queue }
    }

    /// The topologies that may have generated the queue name `name` (their main queue's name is
    /// `name` up to one of its dots), in spec order.
    pub fn generating(&self, name: &str) -> impl Iterator<Item = &'a CompiledTopology> + use<'a> {
        let mut found: Vec<usize> =
            name.match_indices('.').filter_map(|(at, _)| self.main_queue.get(&name[..at])).flatten().copied().collect();
        found.sort_unstable();
        let topologies = self.topologies;
        found.into_iter().map(move |i| topologies[i])
    }
}
