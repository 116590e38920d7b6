//! Properties over generated specs, rather than examples: whatever valid spec a user writes,
//! every object it compiles to has an identity of its own, hopper's own lint finds nothing in
//! it, and its export imported by the broker is exactly what `diff` expects.

use std::collections::BTreeMap;

use hopper::compile::CompiledTopology;
use hopper::hazard;
use hopper::model::{Key, Object};
use hopper::network::Network;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use toml::{Table, Value};

use crate::support::{self, Broker, on_every_broker};

/// One generated topology, before it becomes TOML.
#[derive(Debug, Clone)]
struct Gen {
    name: String,
    vhost: &'static str,
    strategy: &'static str,
    queue_type: &'static str,
    exchange_type: &'static str,
    routing_keys: Vec<String>,
    schedule: Schedule,
    max_attempts: i64,
    delivery_limit: Option<i64>,
    /// Explicit names for (queue, exchange, retry_exchange, dead_letter_exchange, dead_letter_queue).
    names: [Option<String>; 5],
}

#[derive(Debug, Clone)]
enum Schedule {
    Delays(Vec<&'static str>),
    Backoff { initial: &'static str, multiplier: f64, max: Option<&'static str> },
}

/// Characters that have tripped tools before: dots, spaces, quotes, backslashes, slashes,
/// arrows, non-ASCII.
fn word() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just('z'),
            Just('.'),
            Just('-'),
            Just('_'),
            Just(' '),
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('>'),
            Just('é'),
            Just('ü'),
            Just('語'),
            Just('|'),
            Just('#'),
            Just('*'),
        ],
        1..8,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

const DELAYS: &[&str] = &["100ms", "250ms", "1s", "5s", "30s", "2m", "1h", "1d"];

fn topology() -> impl Strategy<Value = Gen> {
    let schedule = prop_oneof![
        proptest::collection::vec(proptest::sample::select(DELAYS), 1..4).prop_map(Schedule::Delays),
        (proptest::sample::select(DELAYS), 1.0f64..3.0, proptest::option::of(Just("1d"))).prop_map(
            |(initial, multiplier, max)| Schedule::Backoff {
                initial,
                multiplier: (multiplier * 4.0).round() / 4.0,
                max
            }
        ),
    ];
    (
        word(),
        proptest::sample::select(&["/", "a/b", "a.b", "ü"][..]),
        proptest::sample::select(&["republish", "chain"][..]),
        proptest::sample::select(&["quorum", "classic"][..]),
        proptest::sample::select(&["direct", "topic", "fanout"][..]),
        proptest::collection::vec(word(), 1..3),
        schedule,
        1i64..6,
        proptest::option::of(1i64..50),
        proptest::array::uniform5(proptest::option::of(word())),
    )
        .prop_map(
            |(
                name,
                vhost,
                strategy,
                queue_type,
                exchange_type,
                routing_keys,
                schedule,
                extra,
                delivery_limit,
                names,
            )| {
                // Enough attempts for every delay given: a delay that is never used is refused.
                let max_attempts = match &schedule {
                    Schedule::Delays(d) => d.len() as i64 + extra,
                    Schedule::Backoff { .. } => extra,
                };
                Gen {
                    name,
                    vhost,
                    strategy,
                    queue_type,
                    exchange_type,
                    routing_keys,
                    schedule,
                    max_attempts,
                    delivery_limit: delivery_limit.filter(|_| queue_type == "quorum"),
                    names,
                }
            },
        )
}

/// A valid spec of one to five topologies: every name made unique by its topology's number, so
/// no two topologies declare the same queue or play two parts with one exchange.
fn spec() -> impl Strategy<Value = Vec<Gen>> {
    proptest::collection::vec(topology(), 1..6)
}

/// Topology number `i` as a TOML table, under its name. Every name gets `~i` at the end, so no
/// two topologies declare the same queue, and each explicit name its key, so one exchange never
/// plays two parts in a topology.
fn table(i: usize, g: &Gen) -> (String, Table) {
    let mut t = Table::new();
    t.insert("strategy".into(), Value::from(g.strategy));
    t.insert("queue_type".into(), Value::from(g.queue_type));
    t.insert("exchange_type".into(), Value::from(g.exchange_type));
    if g.exchange_type != "fanout" {
        t.insert("routing_keys".into(), Value::Array(g.routing_keys.iter().map(|k| Value::from(k.as_str())).collect()));
    }
    match &g.schedule {
        Schedule::Delays(d) => {
            t.insert("delays".into(), Value::Array(d.iter().map(|d| Value::from(*d)).collect()));
        }
        Schedule::Backoff { initial, multiplier, max } => {
            let mut b = Table::new();
            b.insert("initial".into(), Value::from(*initial));
            b.insert("multiplier".into(), Value::from(*multiplier));
            if let Some(max) = max {
                b.insert("max".into(), Value::from(*max));
            }
            t.insert("backoff".into(), Value::Table(b));
        }
    }
    t.insert("max_attempts".into(), Value::from(g.max_attempts));
    if let Some(limit) = g.delivery_limit {
        t.insert("delivery_limit".into(), Value::from(limit));
    }
    let keys = ["queue", "exchange", "retry_exchange", "dead_letter_exchange", "dead_letter_queue"];
    for (key, name) in keys.iter().zip(&g.names) {
        if let Some(name) = name {
            t.insert((*key).into(), Value::from(format!("{name}{key}~{i}")));
        }
    }
    (format!("{}~{i}", g.name), t)
}

/// The spec as files, one per vhost (a file sets one vhost), each vhost with `prefix` in front
/// so that a broker test owns it: (file name, TOML text).
fn files(topologies: &[Gen], prefix: &str) -> Vec<(String, String)> {
    let mut by_vhost: BTreeMap<&str, Table> = BTreeMap::new();
    for (i, g) in topologies.iter().enumerate() {
        let (name, t) = table(i, g);
        by_vhost.entry(g.vhost).or_default().insert(name, Value::Table(t));
    }
    by_vhost
        .into_iter()
        .enumerate()
        .map(|(n, (vhost, all))| {
            let mut root = Table::new();
            root.insert("vhost".into(), Value::from(format!("{prefix}{vhost}")));
            root.insert("topology".into(), Value::Table(all));
            (format!("spec-{n}.toml"), toml::to_string(&root).unwrap())
        })
        .collect()
}

/// Parses and compiles the generated files; a generated spec must be valid.
fn compiled(files: &[(String, String)]) -> Vec<CompiledTopology> {
    let mut sources = hopper::spec::Sources::default();
    for (name, text) in files {
        sources.add(name.into(), text.clone());
    }
    match hopper::spec::from_sources(sources, hopper::spec::Vhosts::AsWritten) {
        Ok(spec) => spec.compiled,
        Err(e) => panic!(
            "a generated spec was refused:\n{}\n{}",
            e.render_plain(),
            files.iter().map(|f| f.1.as_str()).collect::<String>()
        ),
    }
}

static SCHEMA: std::sync::LazyLock<jsonschema::Validator> = std::sync::LazyLock::new(crate::schema::validator);

proptest! {
    #![proptest_config(Config { cases: 200, failure_persistence: None, ..Config::default() })]

    /// Two objects of a vhost with one identity are the same object: nothing is dropped as a
    /// duplicate of something merely named alike.
    #[test]
    fn every_compiled_object_has_an_identity_of_its_own(topologies in spec()) {
        let compiled = compiled(&files(&topologies, ""));
        for group in hopper::ops::by_vhost(&compiled).values() {
            let mut seen: BTreeMap<Key, &Object> = BTreeMap::new();
            for o in group.iter().flat_map(|t| &t.objects) {
                if let Some(other) = seen.insert(o.key(), o) {
                    prop_assert_eq!(other, o, "one identity, two objects");
                }
            }
            // And desired() keeps one of each.
            let desired = hopper::plan::desired(group);
            prop_assert_eq!(desired.len(), seen.len());
        }
    }

    /// Two bindings that print alike (`p -> q` to `r`, and `p` to `q -> r`, both with key
    /// `q -> r`) are two bindings, whatever p, q and r are: both are declared. The generator
    /// above makes names unique, so this one makes them collide on purpose.
    #[test]
    fn bindings_that_print_alike_are_both_declared(p in word(), q in word(), r in word()) {
        let arrow = |a: &str, b: &str| format!("{a} -> {b}");
        let text = format!(
            "[topology.a]\nqueue_type = \"classic\"\nmax_attempts = 1\nexchange = {}\nqueue = {}\nrouting_keys = [{}]\n\n[topology.b]\nqueue_type = \"classic\"\nmax_attempts = 1\nqueue = \"b~\"\nexchange = \"b~\"\ndead_letter_exchange = {}\ndead_letter_queue = {}\n",
            Value::from(arrow(&p, &q)), Value::from(r.clone()), Value::from(arrow(&q, &r)),
            Value::from(p.clone()), Value::from(arrow(&q, &r)),
        );
        // Random words can make one name play two parts (p as a's dead-letter exchange): the
        // spec is then refused, rightly, and says nothing about identities.
        let spec = hopper::spec::from_str("spec.toml", &text);
        prop_assume!(spec.is_ok());
        let compiled = spec.ok().unwrap().compiled;
        let group: Vec<&CompiledTopology> = compiled.iter().collect();
        let desired = hopper::plan::desired(&group);
        let one = hopper::model::Binding::to_queue(arrow(&p, &q), r.as_str(), arrow(&q, &r));
        let two = hopper::model::Binding::to_queue(p.as_str(), arrow(&q, &r), arrow(&q, &r));
        for b in [one, two] {
            prop_assert!(desired.contains(&&Object::Binding(b.clone())), "{} is missing", b);
        }
    }

    /// What hopper accepts, the JSON Schema editors check with accepts too: `delays` or
    /// `backoff`, every strategy, queue type and exchange type, names of every kind.
    #[test]
    fn the_spec_schema_accepts_every_generated_spec(topologies in spec()) {
        let files = files(&topologies, "");
        compiled(&files);
        for (name, text) in &files {
            let errors = crate::schema::errors(&SCHEMA, text);
            prop_assert!(errors.is_empty(), "the schema refuses {}: {:#?}\n{}", name, errors, text);
        }
    }

    /// hopper's own lint finds nothing in what hopper compiles, judged as every release of the
    /// matrix runs it (the delivery limit's default, what counts toward it and which arguments
    /// are known differ), warnings included.
    #[test]
    fn lint_of_anything_hopper_compiles_is_clean(topologies in spec()) {
        let compiled = compiled(&files(&topologies, ""));
        let releases = [hopper::version::Version::new(3, 10, 0), hopper::version::Version::new(4, 0, 0), hopper::version::CURRENT];
        for group in hopper::ops::by_vhost(&compiled).values() {
            for version in releases {
                let findings = hazard::check(&Network::from_compiled(group, version));
                prop_assert!(findings.is_empty(), "on {}: {:#?}", version, findings);
            }
        }
    }
}

/// The broker's own import of `hopper export` is what `hopper diff` expects: in sync. A few
/// generated specs per broker, from a fixed seed so that a failure is reproducible.
async fn export_import_diff_is_in_sync(broker: Broker) {
    let mut runner = TestRunner::new_with_rng(
        Config { cases: 4, failure_persistence: None, ..Config::default() },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    for case in 0..4 {
        let topologies = spec().new_tree(&mut runner).unwrap().current();
        let prefix = support::unique(&format!("hopper-test-props-{case}-"));
        let files = files(&topologies, &prefix);
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<String> = files
            .iter()
            .map(|(name, text)| {
                let path = dir.join(name);
                std::fs::write(&path, text).unwrap();
                path.to_str().unwrap().to_string()
            })
            .collect();
        let vhosts: Vec<String> = compiled(&files).iter().map(|c| c.topology.vhost.clone()).collect();
        let endpoint = broker.endpoint();
        let cleanup = || async {
            for v in &vhosts {
                let _ = hopper::broker::http::delete_vhost(&endpoint, v).await;
            }
            let _ = std::fs::remove_dir_all(&dir);
        };

        let mut args = vec!["export"];
        args.extend(paths.iter().map(String::as_str));
        let out = support::hopper(None, &args);
        assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
        let definitions: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        support::import_definitions(broker, &definitions).await;
        // The import is asynchronous on some versions: wait until diff sees everything.
        let mut diff = vec!["diff", "--format", "json"];
        diff.extend(paths.iter().map(String::as_str));
        let started = std::time::Instant::now();
        let (code, report) = loop {
            let (code, report) = support::hopper_json(Some(broker), &diff);
            if code == Some(0) || started.elapsed() > std::time::Duration::from_secs(30) {
                break (code, report);
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        };
        cleanup().await;
        assert_eq!(code, Some(0), "case {case}: import then diff is not in sync:\n{report:#}\nspec:\n{files:#?}");
    }
}

on_every_broker!(export_import_diff_is_in_sync);

#[test]
fn the_generator_covers_what_it_claims() {
    // A hand-made case through the same path: every kind of name survives TOML and compiles.
    let g = Gen {
        name: "a \"q\\".into(),
        vhost: "a/b",
        strategy: "chain",
        queue_type: "classic",
        exchange_type: "topic",
        routing_keys: vec!["x.*".into()],
        schedule: Schedule::Delays(vec!["1s"]),
        max_attempts: 3,
        delivery_limit: None,
        names: [Some("é語".into()), None, None, None, Some("p -> q".into())],
    };
    let compiled = compiled(&files(&[g], "t-"));
    assert_eq!(compiled[0].topology.vhost, "t-a/b");
    assert!(compiled[0].topology.queue.starts_with("é語"));
}
