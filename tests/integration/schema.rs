//! `hopper schema`, the JSON Schema editors check a spec with: it accepts every example spec
//! (the README's and the book's, `topologies/`, generated ones in props.rs) and refuses what hopper refuses for
//! its keys and types (a misspelt key, a wrong type, a value outside an enum), checked with a
//! real JSON Schema validator.

use std::path::Path;

use serde_json::Value;

use crate::support;

/// The schema, as `hopper schema` prints it.
pub fn schema() -> Value {
    let out = support::hopper(None, &["schema"]);
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice(&out.stdout).expect("hopper schema prints JSON")
}

pub fn validator() -> jsonschema::Validator {
    jsonschema::draft7::new(&schema()).expect("the spec schema is a valid draft-07 schema")
}

/// A spec's TOML as the JSON an editor checks against the schema (taplo does the same).
pub fn as_json(toml_text: &str) -> Value {
    let value: toml::Value = toml::from_str(toml_text).unwrap_or_else(|e| panic!("not TOML: {e}\n{toml_text}"));
    serde_json::to_value(value).unwrap()
}

/// The schema's errors for a spec, as text (empty when it validates).
pub fn errors(validator: &jsonschema::Validator, toml_text: &str) -> Vec<String> {
    let instance = as_json(toml_text);
    validator.iter_errors(&instance).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

fn hopper_accepts(toml_text: &str) -> bool {
    hopper::spec::from_str("t.toml", toml_text).is_ok()
}

#[test]
fn hopper_schema_prints_the_schema_in_the_repository() {
    let file = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/hopper-spec.schema.json")).unwrap();
    let printed = support::text(&support::hopper(None, &["schema"]).stdout);
    assert_eq!(printed.trim_end(), file.trim_end(), "editors may point at the file or at hopper's output");
}

/// Every spec the README and the book show, and every file in topologies/, is valid for hopper
/// and for the schema.
#[test]
fn every_example_spec_validates() {
    let validator = validator();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents = vec![root.join("README.md")];
    documents.extend(
        std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut examples: Vec<(String, String)> = Vec::new();
    for document in &documents {
        let text = std::fs::read_to_string(document).unwrap();
        let blocks = text
            .split("```toml\n")
            .skip(1)
            .map(|block| block.split("```").next().unwrap().to_string())
            .filter(|block| block.contains("[topology."));
        for (i, block) in blocks.enumerate() {
            examples.push((format!("{}, TOML block {}", document.display(), i + 1), block));
        }
    }
    assert!(examples.iter().any(|(name, _)| name.contains("README.md")), "the README shows a spec");
    assert!(examples.iter().any(|(name, _)| name.contains("docs/spec.md")), "the book shows a spec");
    for entry in std::fs::read_dir(root.join("topologies")).unwrap() {
        let path = entry.unwrap().path();
        examples.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
    }
    assert!(examples.len() >= 4, "{examples:?}");
    for (name, text) in &examples {
        assert!(hopper_accepts(text), "hopper refuses the example in {name}:\n{text}");
        let errors = errors(&validator, text);
        assert!(errors.is_empty(), "the schema refuses the example in {name}: {errors:#?}\n{text}");
    }
}

/// What hopper refuses for a key or a type, the schema refuses too, so an editor underlines it
/// as it is typed.
#[test]
fn the_schema_refuses_a_misspelt_key_and_a_wrong_type() {
    let validator = validator();
    for ok in [
        "[topology.orders]\ndelays = [\"5s\", \"30s\"]\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = \"message_id\"\n",
        "[defaults]\nidempotency_key = { header = \"order-id\" }\n[topology.orders]\ndelays = [\"5s\"]\n",
    ] {
        assert!(hopper_accepts(ok) && errors(&validator, ok).is_empty(), "{ok}");
    }
    for bad in [
        "[topology.orders]\ndelay = [\"5s\"]\n",
        "vhosts = \"/\"\n[topology.orders]\ndelays = [\"5s\"]\n",
        "[defaults]\nqueue_typ = \"classic\"\n[topology.orders]\ndelays = [\"5s\"]\n",
        "[topology.orders]\nbackoff = { inital = \"1s\" }\nmax_attempts = 3\n",
        "[topology.orders]\ndelays = [5]\n",
        "[topology.orders]\ndelays = [\"5\"]\n",
        "[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = \"2\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nexchange_type = \"headers\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"stream\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nstrategy = \"retry\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 0\n",
        "[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 101\n",
        "[topology.orders]\ndelays = [\"5s\"]\nbackoff = { initial = \"1s\" }\nmax_attempts = 3\n",
        "[topology.orders]\nbackoff = { initial = \"1s\", multiplier = 2.0, shape = \"linear\" }\nmax_attempts = 3\n",
        "[topology.orders]\nbackoff = { multiplier = 2.0 }\nmax_attempts = 3\n",
        "[topology.orders]\nbackoff = { initial = \"1s\", multiplier = 0.5 }\nmax_attempts = 3\n",
        "[topology.orders]\ndelays = [\"5s\"]\ndelivery_limit = 0\n",
        "[topology]\n",
        "vhost = \"/\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nvhost = \"/\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = \"id\"\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = 5\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { headers = \"order-id\" }\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { header = \"\" }\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { header = \"x-delivery-count\" }\n",
        "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { header = \"Hopper-Attempt\" }\n",
    ] {
        assert!(!hopper_accepts(bad), "hopper accepts:\n{bad}");
        assert!(!errors(&validator, bad).is_empty(), "the schema accepts what hopper refuses:\n{bad}");
    }
}

/// A delay the schema refuses is one hopper refuses: the pattern never underlines a delay that
/// works. (The schema lets through some hopper refuses with a reason: zero, below a
/// millisecond, above ten years.)
#[test]
fn the_schema_never_refuses_a_delay_hopper_accepts() {
    let validator = validator();
    let corpus = [
        "500ms",
        "30s",
        "5m",
        "2h",
        "1d",
        "1w",
        "1h 30m",
        "1h30m",
        " 5s ",
        "10 s",
        "2days",
        "3 hours",
        "1min",
        "90sec",
        "1h 5m 3s",
        "0s",
        "1ns",
        "5",
        "-5s",
        "",
        "s",
        "5.5s",
        "five seconds",
        "5s,",
        "1h-30m",
        "20y",
        "1.5h",
        ".5s",
        "5.s",
        "1.5.5s",
        "1e3ms",
        "0x10s",
    ];
    let mut accepted = Vec::new();
    for delay in corpus {
        let spec = format!("[topology.orders]\ndelays = [{delay:?}]\n");
        let (hopper, schema) = (hopper_accepts(&spec), errors(&validator, &spec).is_empty());
        assert!(schema || !hopper, "the schema refuses {delay:?}, which hopper accepts");
        if hopper {
            accepted.push(delay);
        }
    }
    // The implication above holds for any delay hopper refuses: these are the ones it tests.
    let expected = [
        "500ms", "30s", "5m", "2h", "1d", "1w", "1h 30m", "1h30m", " 5s ", "10 s", "2days", "3 hours", "1min", "90sec",
        "1h 5m 3s", "5.5s", "1.5h",
    ];
    assert_eq!(accepted, expected, "the delays of the corpus hopper accepts");
    // And the pattern is not a blanket string: these are refused by both.
    for delay in ["5", "-5s", "", "five seconds"] {
        let spec = format!("[topology.orders]\ndelays = [{delay:?}]\n");
        assert!(!errors(&validator, &spec).is_empty(), "the schema accepts {delay:?}");
    }
}
