//! Every key a spec file may hold, written once. The parser checks a file against these tables
//! (unknown keys, wrong types, the example in a hint), `hopper schema` is generated from them,
//! and the book's reference table (docs/spec.md) is checked against them by a test; the tests
//! below check that what they say a key accepts is what `validate` accepts.

use crate::topology::{
    DEFAULT_DELIVERY_LIMIT, DEFAULT_JITTER_BUCKETS, ExchangeType, MAX_ATTEMPTS, MAX_JITTER_BUCKETS, QueueType, Strategy,
};

/// What a key's value must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    String,
    /// A string that is one of these words.
    Choice(&'static [&'static str]),
    Integer {
        min: i64,
        max: Option<i64>,
    },
    Number {
        min: f64,
        max: Option<f64>,
    },
    /// A number and a unit: `"500ms"`, `"30s"`.
    Duration,
    Durations,
    Strings,
    /// A table whose keys are in another table of this module.
    Table(&'static [Key]),
    /// `"message_id"`, or a table naming a header.
    IdempotencyKey,
}

impl Value {
    /// What the value must be, as an error message says it: "`jitter` must be a number".
    pub fn expected(self) -> &'static str {
        match self {
            Value::String | Value::Choice(_) => "a string",
            Value::Integer { .. } => "an integer",
            Value::Number { .. } => "a number",
            Value::Duration => "a duration",
            Value::Durations => "an array of durations",
            Value::Strings => "an array of strings",
            Value::Table(_) => "a table",
            Value::IdempotencyKey => "a string or a table",
        }
    }
}

/// One key: its name, its value, what hopper assumes without it, what it means (one sentence,
/// shown by editors and in the book), and an example to show in a hint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Key {
    pub name: &'static str,
    pub value: Value,
    /// Markdown, as the book's table shows it; `""` when there is none.
    pub default: &'static str,
    pub meaning: &'static str,
    pub example: &'static str,
}

impl Key {
    pub fn find<'k>(keys: &'k [Key], name: &str) -> Option<&'k Key> {
        keys.iter().find(|k| k.name == name)
    }
}

/// The names of every variant of a spec enum (its `ALL`), in order: a choice's words are the
/// ones the type `validate` makes of them names itself by.
macro_rules! names {
    ($type:ident) => {{
        let mut names = [""; $type::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = $type::ALL[i].as_str();
            i += 1;
        }
        names
    }};
}

pub const EXCHANGE_TYPES: &[&str] = &names!(ExchangeType);
pub const STRATEGIES: &[&str] = &names!(Strategy);
pub const QUEUE_TYPES: &[&str] = &names!(QueueType);
pub const BACKOFF_SHAPES: &[&str] = &["exponential", "linear"];

/// The keys at the top of a file.
pub const TOP_LEVEL: &[Key] = &[
    Key {
        name: "vhost",
        value: Value::String,
        default: "`/`",
        meaning: "the vhost of every topology in this file; `--vhost` overrides it",
        example: r#"vhost = "/""#,
    },
    Key {
        name: "owner",
        value: Value::String,
        default: "`default`",
        meaning: "who applies this file: the broker records which topologies and objects each owner made in a vhost, and one owner never changes, prunes or binds into what another owns",
        example: r#"owner = "payments""#,
    },
    Key {
        name: "defaults",
        value: Value::Table(TOPOLOGY),
        default: "",
        meaning: "any topology key, inherited by every topology of this file; a topology's own value wins",
        example: "[defaults]",
    },
    Key {
        name: "topology",
        value: Value::Table(TOPOLOGY),
        default: "",
        meaning: "one table per topology: `[topology.NAME]`",
        example: "[topology.orders]",
    },
];

/// The keys of a `[topology.NAME]` or `[defaults]` table, in the order the book lists them.
pub const TOPOLOGY: &[Key] = &[
    Key {
        name: "exchange",
        value: Value::String,
        default: "topology name",
        meaning: "main exchange, where producers publish",
        example: r#"exchange = "orders""#,
    },
    Key {
        name: "exchange_owner",
        value: Value::String,
        default: "none",
        meaning: "the owner of `exchange` when another owner made it: binding into it is then meant, and it is neither claimed nor changed",
        example: r#"exchange_owner = "orders-team""#,
    },
    Key {
        name: "exchange_type",
        value: Value::Choice(EXCHANGE_TYPES),
        default: "`direct`",
        meaning: "`direct`, `topic` or `fanout` (headers exchanges are refused: hopper binds by routing key)",
        example: r#"exchange_type = "topic"  # direct | topic | fanout"#,
    },
    Key {
        name: "routing_keys",
        value: Value::Strings,
        default: "`[topology name]`",
        meaning: "keys binding the main queue to the main exchange; not allowed with `fanout`",
        example: r#"routing_keys = ["order.created", "order.paid"]"#,
    },
    Key {
        name: "delays",
        value: Value::Durations,
        default: "none",
        meaning: "wait before each retry hop, `\"500ms\"`, `\"30s\"`, `\"5m\"`, `\"2h\"`, `\"1d\"` (a raw number is refused: minutes or milliseconds?); if shorter than `max_attempts - 1`, its last value repeats",
        example: r#"delays = ["5s", "30s", "5m"]"#,
    },
    Key {
        name: "backoff",
        value: Value::Table(BACKOFF),
        default: "none",
        meaning: "computed delays, instead of `delays`: `initial` (required), `multiplier` (default 2.0, at least 1.0), `max` (a cap), `shape` (`exponential`, the default: initial × multiplier^n; or `linear`: initial × n, no multiplier)",
        example: r#"backoff = { initial = "1s", multiplier = 2.0, max = "1m" }"#,
    },
    Key {
        name: "max_attempts",
        value: Value::Integer { min: 1, max: Some(MAX_ATTEMPTS) },
        default: "`len(delays) + 1`",
        meaning: "deliveries in total (hops = `max_attempts - 1`); required with `backoff`",
        example: "max_attempts = 4",
    },
    Key {
        name: "strategy",
        value: Value::Choice(STRATEGIES),
        default: "`republish`",
        meaning: "how a failed message reaches its wait: the consumer republishes it (`republish`), the broker dead-letters it through attempt queues (`chain`), or RabbitMQ 4.3's quorum queues delay it themselves (`native`)",
        example: r#"strategy = "republish"  # republish | chain | native"#,
    },
    Key {
        name: "queue_type",
        value: Value::Choice(QUEUE_TYPES),
        default: "`quorum`",
        meaning: "`quorum` or `classic`",
        example: r#"queue_type = "quorum"  # quorum | classic"#,
    },
    Key {
        name: "delivery_limit",
        value: Value::Integer { min: 1, max: None },
        default: "20",
        meaning: "quorum only: `x-delivery-limit` of the queues consumers read; not with `native`, where `max_attempts` sets it",
        example: "delivery_limit = 20",
    },
    Key {
        name: "jitter",
        value: Value::Number { min: 0.0, max: Some(1.0) },
        default: "none",
        meaning: "republish only: spread each hop over `[delay, delay × (1 + jitter)]`, one wait queue per bucket, the consumer picking one at random; `0` turns an inherited one off",
        example: "jitter = 0.3  # each hop's delay spread over [delay, delay * 1.3]",
    },
    Key {
        name: "jitter_buckets",
        value: Value::Integer { min: 2, max: Some(MAX_JITTER_BUCKETS as i64) },
        default: "5",
        meaning: "with `jitter`: wait queues per hop, their delays evenly spaced over the spread",
        example: "jitter_buckets = 5",
    },
    Key {
        name: "queue",
        value: Value::String,
        default: "topology name",
        meaning: "main queue; every generated name derives from it",
        example: r#"queue = "orders""#,
    },
    Key {
        name: "retry_exchange",
        value: Value::String,
        default: "`<queue>.retry`",
        meaning: "where retries are published or dead-lettered to their wait queues",
        example: r#"retry_exchange = "orders.retry""#,
    },
    Key {
        name: "dead_letter_exchange",
        value: Value::String,
        default: "`<queue>.dlx`",
        meaning: "where a message goes after its last attempt",
        example: r#"dead_letter_exchange = "orders.dlx""#,
    },
    Key {
        name: "dead_letter_queue",
        value: Value::String,
        default: "`<queue>.dlq`",
        meaning: "the parking lot",
        example: r#"dead_letter_queue = "orders.dlq""#,
    },
    Key {
        name: "idempotency_key",
        value: Value::IdempotencyKey,
        default: "none (the message id, with a lint warning)",
        meaning: "what tells a consumer a message it has handled: `\"message_id\"` (the AMQP `message-id` property, which producers set) or `{ header = \"order-id\" }` (an application header producers set); a header hopper or the broker writes (`hopper-*`, `x-*`) is refused: it changes between deliveries",
        example: r#"idempotency_key = "message_id"  # or { header = "order-id" }"#,
    },
];

/// The keys of `backoff = { ... }`.
pub const BACKOFF: &[Key] = &[
    Key {
        name: "initial",
        value: Value::Duration,
        default: "",
        meaning: "the first hop's delay",
        example: r#"initial = "1s""#,
    },
    Key {
        name: "multiplier",
        value: Value::Number { min: 1.0, max: None },
        default: "2.0",
        meaning: "each hop's delay over the one before; not with `shape = \"linear\"`",
        example: "multiplier = 2.0",
    },
    Key {
        name: "max",
        value: Value::Duration,
        default: "none",
        meaning: "the longest delay",
        example: r#"max = "1m""#,
    },
    Key {
        name: "shape",
        value: Value::Choice(BACKOFF_SHAPES),
        default: "`exponential`",
        meaning: "`exponential` (initial × multiplier^n) or `linear` (initial × n)",
        example: r#"shape = "linear"  # exponential | linear"#,
    },
];

/// The keys of `idempotency_key = { ... }`.
pub const IDEMPOTENCY_KEY: &[Key] = &[Key {
    name: "header",
    value: Value::String,
    default: "",
    meaning: "an application header producers set",
    example: r#"idempotency_key = { header = "order-id" }"#,
}];

/// The book's defaults that are numbers, checked against the constants the code uses.
const _: () = assert!(DEFAULT_DELIVERY_LIMIT == 20 && DEFAULT_JITTER_BUCKETS == 5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn accepts(key: &str, value: &str) -> bool {
        let schedule = match key {
            "delays" | "backoff" | "max_attempts" => "",
            _ => "delays = [\"1s\"]\n",
        };
        let jitter = if key == "jitter_buckets" { "jitter = 0.2\n" } else { "" };
        let text = format!("[topology.t]\n{schedule}{jitter}{key} = {value}\n");
        spec::from_str("t.toml", &text).is_ok()
    }

    /// Each word a choice lists is one hopper accepts, and a word it does not list is refused.
    #[test]
    fn the_choices_are_what_hopper_accepts() {
        for key in TOPOLOGY {
            if let Value::Choice(words) = key.value {
                for word in words {
                    let value = format!("\"{word}\"");
                    // native needs a schedule it can express: a linear backoff, on quorum queues.
                    let ok = match (key.name, *word) {
                        ("strategy", "native") => spec::from_str(
                            "t.toml",
                            "[topology.t]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }\nmax_attempts = 5\n",
                        )
                        .is_ok(),
                        _ => accepts(key.name, &value),
                    };
                    assert!(ok, "{} = {value} is refused", key.name);
                }
                assert!(!accepts(key.name, "\"nonsense\""), "{} accepts a word it does not list", key.name);
            }
        }
    }

    /// The bounds an integer or number key states are the ones hopper checks, on both sides.
    #[test]
    fn the_bounds_are_what_hopper_checks() {
        for key in TOPOLOGY {
            let (min, max, step) = match key.value {
                Value::Integer { min, max } => (min as f64, max.map(|m| m as f64), 1.0),
                Value::Number { min, max } => (min, max, 0.01),
                _ => continue,
            };
            let value = |v: f64| if step == 1.0 { format!("{}", v as i64) } else { format!("{v:?}") };
            let accepted = |v: f64| match key.name {
                // max_attempts = N needs N - 1 delays.
                "max_attempts" => spec::from_str(
                    "t.toml",
                    &format!("[topology.t]\nmax_attempts = {}\nbackoff = {{ initial = \"1s\" }}\n", value(v)),
                )
                .is_ok(),
                _ => accepts(key.name, &value(v)),
            };
            assert!(accepted(min), "{} = {} is refused", key.name, value(min));
            assert!(!accepted(min - step), "{} = {} is accepted", key.name, value(min - step));
            if let Some(max) = max {
                assert!(accepted(max), "{} = {} is refused", key.name, value(max));
                assert!(!accepted(max + step), "{} = {} is accepted", key.name, value(max + step));
            }
        }
    }

    /// Every key's example is a valid line of a topology table (the hint shows it to be copied).
    #[test]
    fn every_example_is_valid() {
        for key in TOPOLOGY {
            let line = key.example.split("  #").next().unwrap();
            let (name, value) = line.split_once(" = ").unwrap();
            assert_eq!(name, key.name);
            let ok = match key.name {
                "max_attempts" => {
                    spec::from_str("t.toml", &format!("[topology.t]\ndelays = [\"1s\"]\n{line}\n")).is_ok()
                }
                "backoff" | "delays" => {
                    spec::from_str("t.toml", &format!("[topology.t]\n{line}\nmax_attempts = 4\n")).is_ok()
                }
                _ => accepts(key.name, value),
            };
            assert!(ok, "the example of `{}` is refused: {line}", key.name);
        }
    }
}
