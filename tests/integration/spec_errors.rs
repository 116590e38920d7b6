//! Bad specs: every mistake is reported with a precise message, at the file, line and column
//! where it was written, with a hint on how to fix it, and before anything reaches a broker.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use hopper::spec::{self, Diagnostic, Sources, SpecError};

/// One bad spec and the diagnostic it must produce.
struct Case {
    name: &'static str,
    toml: &'static str,
    /// 1-based, as an editor shows it.
    line: usize,
    column: usize,
    /// A specific part of the diagnostic's message.
    message: &'static str,
    /// A specific part of the diagnostic's hint; the hint must be present.
    hint: &'static str,
}

const CASES: &[Case] = &[
    // TOML syntax, reported by the TOML parser.
    Case {
        name: "invalid TOML: unquoted string",
        toml: "[topology.orders]\nexchange = orders\n",
        line: 2,
        column: 12,
        message: "invalid TOML: string values must be quoted",
        hint: "https://toml.io",
    },
    Case {
        name: "invalid TOML: unclosed array",
        toml: "[topology.orders]\ndelays = [\"5s\"\n",
        line: 2,
        column: 15,
        message: "invalid TOML: unclosed array",
        hint: "https://toml.io",
    },
    Case {
        name: "invalid TOML: duplicate key",
        toml: "[topology.orders]\nmax_attempts = 3\nmax_attempts = 4\ndelays = [\"5s\"]\n",
        line: 3,
        column: 1,
        message: "invalid TOML: duplicate key",
        hint: "https://toml.io",
    },
    // Unknown keys.
    Case {
        name: "unknown top-level key with a near miss",
        toml: "vhosts = \"/\"\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 1,
        column: 1,
        message: "unknown key `vhosts` in the top level",
        hint: "did you mean `vhost`?",
    },
    Case {
        name: "topology key at the top level",
        toml: "delays = [\"5s\"]\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 1,
        column: 1,
        message: "unknown key `delays` in the top level",
        hint: "`delays` belongs inside a [topology.NAME] or [defaults] section",
    },
    Case {
        name: "unknown key in a topology",
        toml: "[topology.orders]\ndelay = [\"5s\"]\nmax_attempts = 1\n",
        line: 2,
        column: 1,
        message: "unknown key `delay` in [topology.orders]",
        hint: "did you mean `delays`?",
    },
    Case {
        name: "unknown key in [defaults]",
        toml: "[defaults]\nqueue_typ = \"quorum\"\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 2,
        column: 1,
        message: "unknown key `queue_typ` in [defaults]",
        hint: "did you mean `queue_type`?",
    },
    Case {
        name: "unknown key in an inline backoff",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1s\", multiplyer = 2.0 }\n",
        line: 3,
        column: 29,
        message: "unknown key `multiplyer` in `backoff` of [topology.orders]",
        hint: "did you mean `multiplier`?",
    },
    Case {
        name: "unknown key in a backoff section",
        toml: "[topology.orders]\nmax_attempts = 3\n[topology.orders.backoff]\ninitial = \"1s\"\nmultiplyer = 2\n",
        line: 5,
        column: 1,
        message: "unknown key `multiplyer` in `backoff` of [topology.orders]",
        hint: "did you mean `multiplier`?",
    },
    // Values of the wrong type.
    Case {
        name: "vhost not a string",
        toml: "vhost = 1\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 1,
        column: 9,
        message: "`vhost` must be a string, not an integer",
        hint: "vhost = \"/\"",
    },
    Case {
        name: "topology not a table",
        toml: "topology = \"orders\"\n",
        line: 1,
        column: 12,
        message: "`topology` must be a table, not the string \"orders\"",
        hint: "[topology.orders]",
    },
    Case {
        name: "defaults not a table",
        toml: "defaults = 1\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 1,
        column: 12,
        message: "`defaults` must be a table, not an integer",
        hint: "[defaults]",
    },
    Case {
        name: "[topology] entry not a table",
        toml: "[topology]\norders = 1\n",
        line: 2,
        column: 1,
        message: "`topology.orders` must be a table",
        hint: "declare it as a section: [topology.orders]",
    },
    Case {
        name: "max_attempts as a string",
        toml: "[topology.orders]\nmax_attempts = \"4\"\ndelays = [\"5s\"]\n",
        line: 2,
        column: 16,
        message: "`max_attempts` must be an integer, not the string \"4\"",
        hint: "max_attempts = 4",
    },
    Case {
        name: "max_attempts as a float",
        toml: "[topology.orders]\nmax_attempts = 3.0\ndelays = [\"5s\"]\n",
        line: 2,
        column: 16,
        message: "`max_attempts` must be an integer, not a float",
        hint: "max_attempts = 4",
    },
    Case {
        name: "delays as a string",
        toml: "[topology.orders]\nmax_attempts = 3\ndelays = \"5s\"\n",
        line: 3,
        column: 10,
        message: "`delays` must be an array of durations, not the string \"5s\"",
        hint: "delays = [\"5s\", \"30s\", \"5m\"]",
    },
    Case {
        name: "a delay given as an integer",
        toml: "[topology.orders]\ndelays = [\"5s\", 30]\n",
        line: 2,
        column: 17,
        message: "must be a string, not an integer",
        hint: "delays = [\"5s\", \"30s\", \"5m\"]",
    },
    Case {
        name: "backoff not a table",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = \"1s\"\n",
        line: 3,
        column: 11,
        message: "`backoff` must be a table, not the string \"1s\"",
        hint: "backoff = { initial = \"1s\", multiplier = 2.0, max = \"1m\" }",
    },
    Case {
        name: "backoff multiplier as a string",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1s\", multiplier = \"2\" }\n",
        line: 3,
        column: 42,
        message: "`multiplier` must be a number, not the string \"2\"",
        hint: "multiplier = 2.0",
    },
    Case {
        name: "routing key not a string (column counts characters, not bytes)",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nrouting_keys = [\"café\", 1]\n",
        line: 3,
        column: 25,
        message: "must be a string, not an integer",
        hint: "routing_keys = [\"order.created\", \"order.paid\"]",
    },
    // max_attempts out of range.
    Case {
        name: "max_attempts = 0",
        toml: "[topology.orders]\nmax_attempts = 0\n",
        line: 2,
        column: 16,
        message: "`max_attempts` must be at least 1, not 0",
        hint: "1 means no retry",
    },
    Case {
        name: "max_attempts negative",
        toml: "[topology.orders]\nmax_attempts = -3\n",
        line: 2,
        column: 16,
        message: "`max_attempts` must be at least 1, not -3",
        hint: "1 means no retry",
    },
    Case {
        name: "max_attempts = 1000",
        toml: "[topology.orders]\nmax_attempts = 1000\ndelays = [\"5s\"]\n",
        line: 2,
        column: 16,
        message: "`max_attempts` = 1000 is more than hopper allows (100)",
        hint: "use backoff with a `max`",
    },
    Case {
        name: "CRLF line endings do not shift positions",
        toml: "[topology.orders]\r\ndelays = [\"5s\"]\r\nmax_attempts = 0\r\n",
        line: 3,
        column: 16,
        message: "`max_attempts` must be at least 1, not 0",
        hint: "1 means no retry",
    },
    // Delays.
    Case {
        name: "empty delays with retries",
        toml: "[topology.orders]\nmax_attempts = 3\ndelays = []\n",
        line: 3,
        column: 10,
        message: "`delays` is empty but the topology retries",
        hint: "delays = [\"30s\"]",
    },
    Case {
        name: "a delay without a unit",
        toml: "[topology.orders]\ndelays = [\"5000\"]\n",
        line: 2,
        column: 11,
        message: "delay \"5000\" has no unit",
        hint: "write \"5000ms\" or \"5000s\"",
    },
    Case {
        name: "the second delay without a unit",
        toml: "[topology.orders]\ndelays = [\"5s\", \"30\"]\n",
        line: 2,
        column: 17,
        message: "delay \"30\" has no unit",
        hint: "write \"30ms\" or \"30s\"",
    },
    Case {
        name: "an unparseable delay",
        toml: "[topology.orders]\ndelays = [\"5 parsecs\"]\n",
        line: 2,
        column: 11,
        message: "\"5 parsecs\" is not a duration",
        hint: "write a number and a unit",
    },
    Case {
        name: "a zero delay",
        toml: "[topology.orders]\ndelays = [\"0s\"]\n",
        line: 2,
        column: 11,
        message: "a delay must be longer than zero",
        hint: "a zero TTL expires messages on arrival",
    },
    Case {
        name: "a negative delay",
        toml: "[topology.orders]\ndelays = [\"-5s\"]\n",
        line: 2,
        column: 11,
        message: "a delay cannot be negative",
        hint: "write a number and a unit",
    },
    Case {
        name: "a delay over 10 years",
        toml: "[topology.orders]\ndelays = [\"4000d\"]\n",
        line: 2,
        column: 11,
        message: "delay \"4000d\" is longer than RabbitMQ's largest TTL (10 years)",
        hint: "315360000000 ms",
    },
    Case {
        name: "a delay finer than a millisecond",
        toml: "[topology.orders]\ndelays = [\"1us\"]\n",
        line: 2,
        column: 11,
        message: "delay \"1us\" is not a whole number of milliseconds",
        hint: "milliseconds",
    },
    Case {
        name: "more delays than hops",
        toml: "[topology.orders]\nmax_attempts = 2\ndelays = [\"5s\", \"30s\"]\n",
        line: 3,
        column: 10,
        message: "2 delays given but max_attempts allows only 1 retry hop(s)",
        hint: "raise max_attempts to 3",
    },
    Case {
        name: "delays and backoff both",
        toml: "[topology.orders]\nmax_attempts = 3\ndelays = [\"5s\"]\nbackoff = { initial = \"1s\" }\n",
        line: 4,
        column: 11,
        message: "`delays` and `backoff` are both set",
        hint: "keep one",
    },
    Case {
        name: "no delays and no backoff with max_attempts > 1",
        toml: "[topology.orders]\nmax_attempts = 3\n",
        line: 1,
        column: 11,
        message: "topology `orders` retries 2 time(s) but sets no delays",
        hint: "or set max_attempts = 1 for no retry",
    },
    // Backoff.
    Case {
        name: "backoff without max_attempts",
        toml: "[topology.orders]\nbackoff = { initial = \"1s\" }\n",
        line: 1,
        column: 11,
        message: "topology `orders` has no `max_attempts`",
        hint: "max_attempts = 4",
    },
    Case {
        name: "backoff without initial",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = { multiplier = 2.0 }\n",
        line: 3,
        column: 11,
        message: "`backoff` has no `initial` delay",
        hint: "initial = \"1s\"",
    },
    Case {
        name: "backoff multiplier below 1",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1s\", multiplier = 0.5 }\n",
        line: 3,
        column: 42,
        message: "`multiplier` must be at least 1.0, not 0.5",
        hint: "use 1.0 for a fixed delay",
    },
    Case {
        name: "backoff max below initial",
        toml: "[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1m\", max = \"1s\" }\n",
        line: 3,
        column: 35,
        message: "`max` is shorter than `initial`",
        hint: "it must be at least `initial`",
    },
    // Choices.
    Case {
        name: "unknown strategy",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nstrategy = \"chained\"\n",
        line: 3,
        column: 12,
        message: "unknown strategy \"chained\"",
        hint: "\"republish\", \"chain\"",
    },
    Case {
        name: "unknown queue_type",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"stream\"\n",
        line: 3,
        column: 14,
        message: "unknown queue type \"stream\"",
        hint: "\"quorum\", \"classic\"",
    },
    Case {
        name: "unknown exchange_type",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nexchange_type = \"fan-out\"\n",
        line: 3,
        column: 17,
        message: "unknown exchange type \"fan-out\"",
        hint: "\"direct\", \"topic\", \"fanout\"",
    },
    Case {
        name: "headers exchange type",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nexchange_type = \"headers\"\n",
        line: 3,
        column: 17,
        message: "headers exchanges are not supported as a main exchange",
        hint: "use \"direct\", \"topic\" or \"fanout\"",
    },
    // Routing keys.
    Case {
        name: "routing_keys with fanout",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nexchange_type = \"fanout\"\nrouting_keys = [\"a\"]\n",
        line: 4,
        column: 16,
        message: "a fanout exchange ignores routing keys",
        hint: "remove `routing_keys`",
    },
    Case {
        name: "empty routing_keys",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nrouting_keys = []\n",
        line: 3,
        column: 16,
        message: "`routing_keys` is empty: the main queue would receive nothing",
        hint: "routing_keys = [\"orders\"]",
    },
    // Jitter.
    Case {
        name: "jitter on a chain topology",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nstrategy = \"chain\"\njitter = 0.3\n",
        line: 4,
        column: 10,
        message: "strategy \"chain\" cannot spread its retries",
        hint: "use strategy = \"republish\", where the consumer picks a wait queue at random",
    },
    Case {
        name: "jitter on a native topology",
        toml: "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }\nmax_attempts = 3\njitter = 0.3\n",
        line: 5,
        column: 10,
        message: "strategy \"native\" cannot spread its retries",
        hint: "the same for every message",
    },
    Case {
        name: "jitter inherited by a chain topology",
        toml: "[defaults]\njitter = 0.3\n\n[topology.orders]\ndelays = [\"5s\"]\nstrategy = \"chain\"\n",
        line: 4,
        column: 11,
        message: "topology `orders` inherits `jitter` from [defaults], but strategy \"chain\" cannot spread its retries",
        hint: "or jitter = 0",
    },
    Case {
        name: "jitter out of range",
        toml: "[topology.orders]\ndelays = [\"5s\"]\njitter = 1.5\n",
        line: 3,
        column: 10,
        message: "`jitter` = 1.5 is outside 0..=1",
        hint: "0 turns it off",
    },
    Case {
        name: "jitter_buckets without jitter",
        toml: "[topology.orders]\ndelays = [\"5s\"]\njitter_buckets = 4\n",
        line: 3,
        column: 18,
        message: "`jitter_buckets` without `jitter`",
        hint: "jitter = 0.3",
    },
    Case {
        name: "jitter_buckets out of range",
        toml: "[topology.orders]\ndelays = [\"5s\"]\njitter = 0.3\njitter_buckets = 50\n",
        line: 4,
        column: 18,
        message: "`jitter_buckets` = 50 is outside 2..=20",
        hint: "each bucket is a wait queue per hop",
    },
    Case {
        name: "republish main queue named like a jitter bucket key",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nqueue = \"1.2\"\n",
        line: 3,
        column: 9,
        message: "the main queue is named `1.2`, like a hop number",
        hint: "choose another name",
    },
    // Names.
    Case {
        name: "republish main queue named like a hop number",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nqueue = \"1\"\n",
        line: 3,
        column: 9,
        message: "the main queue is named `1`, like a hop number",
        hint: "the retry exchange routes hop numbers to wait queues",
    },
    Case {
        name: "exchange name starting with amq.",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nexchange = \"amq.orders\"\n",
        line: 3,
        column: 12,
        message: "the exchange name `amq.orders` starts with `amq.`",
        hint: "RabbitMQ reserves names starting with `amq.`",
    },
    Case {
        name: "empty queue name",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nqueue = \"\"\n",
        line: 3,
        column: 9,
        message: "the queue name is empty",
        hint: "give it a name",
    },
    // Delivery limit.
    Case {
        name: "delivery_limit on a classic queue",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"classic\"\ndelivery_limit = 5\n",
        line: 4,
        column: 18,
        message: "`delivery_limit` applies only to quorum queues",
        hint: "queue_type = \"quorum\"",
    },
    Case {
        name: "delivery_limit = 0",
        toml: "[topology.orders]\ndelays = [\"5s\"]\ndelivery_limit = 0\n",
        line: 3,
        column: 18,
        message: "`delivery_limit` must be at least 1, not 0",
        hint: "needs a finite limit",
    },
    // Vhost.
    Case {
        name: "empty vhost",
        toml: "vhost = \"\"\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 1,
        column: 9,
        message: "`vhost` is empty",
        hint: "vhost = \"/\"",
    },
    // The idempotency key: one the producer sets and nothing changes between deliveries.
    Case {
        name: "idempotency_key: an unknown name",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = \"id\"\n",
        line: 3,
        column: 19,
        message: "unknown idempotency key \"id\"",
        hint: "idempotency_key = \"message_id\"",
    },
    Case {
        name: "idempotency_key: a header the broker changes",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { header = \"x-delivery-count\" }\n",
        line: 3,
        column: 30,
        message: "`x-delivery-count` is a header RabbitMQ owns",
        hint: "changes some on every delivery",
    },
    Case {
        name: "idempotency_key: hopper's attempt header",
        toml: "[defaults]\nidempotency_key = { header = \"hopper-attempt\" }\n[topology.orders]\ndelays = [\"5s\"]\n",
        line: 2,
        column: 30,
        message: "`hopper-attempt` is a header hopper owns",
        hint: "hopper-attempt counts attempts",
    },
    Case {
        name: "idempotency_key: a table without header",
        toml: "[topology.orders]\ndelays = [\"5s\"]\nidempotency_key = { heder = \"order-id\" }\n",
        line: 3,
        column: 21,
        message: "unknown key `heder` in `idempotency_key` of [topology.orders]",
        hint: "did you mean `header`?",
    },
];

fn describe_all(err: &SpecError) -> String {
    err.diagnostics
        .iter()
        .map(|d| format!("  {}: {} (hint: {:?})", err.position(d), d.message, d.hint))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks `case` and returns what is wrong, so that one run lists every failing case.
fn check(case: &Case) -> Result<(), String> {
    let err = match spec::from_str("bad.toml", case.toml) {
        Ok(_) => return Err("the spec was accepted".into()),
        Err(err) => err,
    };
    let Some(d) = err.diagnostics.iter().find(|d| d.message.contains(case.message)) else {
        return Err(format!("no diagnostic says {:?}; got:\n{}", case.message, describe_all(&err)));
    };
    let pos = err.position(d);
    let mut problems = Vec::new();
    if pos.path != Path::new("bad.toml") || (pos.line, pos.column) != (case.line, case.column) {
        problems.push(format!("at {pos}, expected bad.toml:{}:{}", case.line, case.column));
    }
    match &d.hint {
        None => problems.push("no hint".to_string()),
        Some(hint) if !hint.contains(case.hint) => problems.push(format!("hint {hint:?} lacks {:?}", case.hint)),
        Some(_) => {}
    }
    if d.label.is_empty() {
        problems.push("no label under the caret".to_string());
    }
    if problems.is_empty() { Ok(()) } else { Err(format!("{:?}: {}", d.message, problems.join("; "))) }
}

#[test]
fn every_bad_spec_is_reported_at_its_position_with_a_hint() {
    let failures: Vec<String> =
        CASES.iter().filter_map(|case| check(case).err().map(|e| format!("case `{}`: {e}", case.name))).collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

#[test]
fn case_names_are_distinct() {
    let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len(), "two cases share a name");
}

fn error(name: &str, text: &str) -> SpecError {
    match spec::from_str(name, text) {
        Ok(_) => panic!("the spec was accepted:\n{text}"),
        Err(err) => err,
    }
}

/// The one diagnostic whose message contains `message`.
fn find<'e>(err: &'e SpecError, message: &str) -> &'e Diagnostic {
    err.diagnostics
        .iter()
        .find(|d| d.message.contains(message))
        .unwrap_or_else(|| panic!("no diagnostic says {message:?}; got:\n{}", describe_all(err)))
}

fn line_col(err: &SpecError, file: usize, offset: usize) -> (usize, usize) {
    let d = Diagnostic::new(file, offset..offset, "");
    let pos = err.position(&d);
    (pos.line, pos.column)
}

#[test]
fn queue_name_over_255_bytes() {
    // The derived names are set so that only the queue name itself is too long.
    let text = format!(
        "[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\nretry_exchange = \"r\"\ndead_letter_exchange = \"x\"\ndead_letter_queue = \"d\"\n",
        "q".repeat(256)
    );
    let err = error("bad.toml", &text);
    assert_eq!(err.diagnostics.len(), 1, "{}", describe_all(&err));
    let d = find(&err, "the queue name is 256 bytes long; RabbitMQ allows 255");
    assert_eq!(err.position(d).to_string(), "bad.toml:3:9");
    assert!(d.hint.as_deref().is_some_and(|h| h.contains("choose a shorter name")), "{:?}", d.hint);
}

#[test]
fn generated_name_over_255_bytes() {
    // 250 bytes fit a queue name, but `<name>.wait-5s` (258) does not.
    let text = format!("[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\n", "q".repeat(250));
    let err = error("bad.toml", &text);
    assert_eq!(err.diagnostics.len(), 1, "{}", describe_all(&err));
    let d = find(&err, ".wait-5s` is 258 bytes; RabbitMQ allows 255");
    assert!(d.message.starts_with("the generated name `qqq"), "{}", d.message);
    assert_eq!(err.position(d).to_string(), "bad.toml:3:9");
    assert!(d.hint.as_deref().is_some_and(|h| h.contains("shorten the queue name")), "{:?}", d.hint);
}

/// A quorum queue's vhost and name together may exceed 255 bytes: RabbitMQ 3.10, 4.0 and 4.3 take
/// such queues (the broker test `a_long_vhost_and_name_work` proves it), so hopper does too.
#[test]
fn a_quorum_queue_name_is_not_limited_by_its_vhost() {
    let text = format!(
        "vhost = \"{}\"\n[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\ndead_letter_queue = \"{}\"\n",
        "v".repeat(200),
        "q".repeat(240),
        "d".repeat(253)
    );
    assert!(spec::from_str("ok.toml", &text).is_ok());
}

#[test]
fn two_topologies_in_one_vhost_declaring_the_same_queue() {
    let text = "\
[topology.orders]
delays = [\"5s\"]

[topology.orders2]
queue = \"orders\"
delays = [\"5s\"]
";
    let err = error("bad.toml", text);
    assert_eq!(err.diagnostics.len(), 1, "one diagnostic for the pair: {}", describe_all(&err));
    let d = find(&err, "queues `orders`, `orders.wait-5s`, `orders.dlq` in vhost `/` are declared by two topologies");
    // Reported at the `queue` line that caused it, the first topology as related.
    assert_eq!(err.position(d).to_string(), "bad.toml:5:9");
    assert_eq!(d.label, "`orders2` declares `orders` as its main queue");
    let (file, span, label) = d.related.clone().expect("a related label at the first topology");
    assert_eq!(line_col(&err, file, span.start), (1, 11));
    assert_eq!(&text[span], "orders");
    assert_eq!(label, "`orders` declares it too");
    assert!(d.hint.as_deref().is_some_and(|h| h.contains("set `queue`")), "{:?}", d.hint);

    // The same topologies in two vhosts do not collide.
    let mut sources = Sources::default();
    sources.add(PathBuf::from("a.toml"), "vhost = \"a\"\n[topology.orders]\ndelays = [\"5s\"]\n".into());
    sources.add(
        PathBuf::from("b.toml"),
        "vhost = \"b\"\n[topology.orders2]\nqueue = \"orders\"\ndelays = [\"5s\"]\n".into(),
    );
    assert!(spec::from_sources(sources, hopper::spec::Vhosts::AsWritten).is_ok());
}

#[test]
fn main_exchange_declared_with_two_types() {
    let text = "\
[topology.a]
exchange = \"events\"
exchange_type = \"topic\"
delays = [\"5s\"]

[topology.b]
exchange = \"events\"
exchange_type = \"direct\"
delays = [\"5s\"]
";
    let err = error("bad.toml", text);
    assert_eq!(err.diagnostics.len(), 1, "{}", describe_all(&err));
    let d = find(&err, "exchange `events` is declared as direct here and as topic by `a`");
    // At the `exchange_type` that disagrees, the first topology as related.
    assert_eq!(err.position(d).to_string(), "bad.toml:8:17");
    let (file, span, label) = d.related.clone().expect("a related label at the first topology");
    assert_eq!(line_col(&err, file, span.start), (1, 11));
    assert_eq!(label, "`a` uses it too");
    assert!(d.hint.as_deref().is_some_and(|h| h.contains("of the same type may be shared")), "{:?}", d.hint);

    // With one type, the main exchange may be shared.
    let same = text.replace("\"direct\"", "\"topic\"");
    assert!(spec::from_str("ok.toml", &same).is_ok());
}

#[test]
fn duplicate_topology_across_files_points_at_both() {
    let first = "vhost = \"/\"\n\n[topology.orders]\ndelays = [\"5s\"]\n";
    let second = "# payments and, by mistake, orders again\n[topology.payments]\ndelays = [\"5s\"]\n\n[topology.orders]\ndelays = [\"1m\"]\n";
    let mut sources = Sources::default();
    let a = sources.add(PathBuf::from("a.toml"), first.into());
    let b = sources.add(PathBuf::from("b.toml"), second.into());
    let err = match spec::from_sources(sources, hopper::spec::Vhosts::AsWritten) {
        Ok(_) => panic!("a topology defined in two files was accepted"),
        Err(err) => err,
    };
    assert_eq!(err.diagnostics.len(), 1, "{}", describe_all(&err));
    let d = find(&err, "topology `orders` is defined twice");
    assert_eq!(d.file, b);
    assert_eq!(err.position(d).to_string(), "b.toml:5:11");
    assert_eq!(d.label, "second definition");
    let (file, span, label) = d.related.clone().expect("a related label at the first definition");
    assert_eq!(file, a, "the related label must point into the first file");
    assert_eq!(line_col(&err, file, span.start), (3, 11));
    assert_eq!(&first[span], "orders");
    assert_eq!(label, "first defined here");
    assert!(d.hint.as_deref().is_some_and(|h| h.contains("unique across all spec files")), "{:?}", d.hint);

    let rendered = err.render_plain();
    assert!(rendered.contains("┌─ b.toml:5:11"), "{rendered}");
    assert!(rendered.contains("a.toml:3:11"), "{rendered}");
    assert!(rendered.contains("first defined here"), "{rendered}");
}

#[test]
fn all_errors_are_reported_at_once() {
    // Three independent mistakes in three places: one run reports all of them, in file order.
    let text = "\
vhosts = \"/\"

[topology.orders]
delays = [\"5s\"]
queue_type = \"stream\"

[topology.payments]
delays = [\"5s\"]
max_attempts = 0
";
    let err = error("bad.toml", text);
    let got: Vec<(String, usize, usize)> = err
        .diagnostics
        .iter()
        .map(|d| {
            let pos = err.position(d);
            (d.message.clone(), pos.line, pos.column)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("unknown key `vhosts` in the top level".to_string(), 1, 1),
            ("unknown queue type \"stream\"".to_string(), 5, 14),
            ("`max_attempts` must be at least 1, not 0".to_string(), 9, 16),
        ],
        "\n{}",
        err.render_plain()
    );
    assert!(err.diagnostics.iter().all(|d| d.hint.is_some()));
}

#[test]
fn errors_in_several_files_are_all_reported_with_their_own_path() {
    let mut sources = Sources::default();
    sources.add(PathBuf::from("a.toml"), "[topology.orders]\ndelays = [\"5000\"]\nmax_attempts = 1\n".into());
    sources.add(PathBuf::from("b.toml"), "[topology.payments]\ndelays = [\"5s\"]\nstrategy = \"chained\"\n".into());
    let err = match spec::from_sources(sources, hopper::spec::Vhosts::AsWritten) {
        Ok(_) => panic!("accepted"),
        Err(err) => err,
    };
    let positions: Vec<String> = err.diagnostics.iter().map(|d| err.position(d).to_string()).collect();
    assert_eq!(positions, ["a.toml:2:11", "b.toml:3:12"], "\n{}", describe_all(&err));
}

#[test]
fn rendered_diagnostic_quotes_the_line_with_a_caret_and_a_hint() {
    let err = error("bad.toml", "[topology.orders]\nexchange = orders\n");
    let rendered = err.render_plain();
    for expected in [
        "error: invalid TOML: string values must be quoted",
        "┌─ bad.toml:2:12",
        "2 │ exchange = orders",
        "^^^^^^ here",
        "= hint: see https://toml.io",
    ] {
        assert!(rendered.contains(expected), "{expected:?} missing from:\n{rendered}");
    }
}

// The built binary.

/// A file or directory under the temp dir, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn path(name: &str) -> PathBuf {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!("hopper-spec-errors-{}-{n}-{name}", std::process::id()))
    }

    fn file(name: &str, text: &str) -> Temp {
        let path = Temp::path(name);
        std::fs::write(&path, text).expect("write a temp spec");
        Temp(path)
    }

    fn dir(name: &str) -> Temp {
        let path = Temp::path(name);
        std::fs::create_dir(&path).expect("create a temp dir");
        Temp(path)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Runs hopper with no broker in its environment, on `spec`.
fn hopper(args: &[&str], spec: &Path) -> Output {
    crate::support::hopper(None, &[args, &[spec.to_str().unwrap()]].concat())
}

const BAD: &str = "[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"stream\"\n";

#[test]
fn compile_exits_2_with_the_position_message_and_hint() {
    let bad = Temp::file("BAD.toml", BAD);
    let out = hopper(&["compile"], &bad.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    for expected in [
        format!("┌─ {}:3:14", bad.0.display()),
        "unknown queue type \"stream\"".to_string(),
        "hint: use one of \"quorum\", \"classic\"".to_string(),
        "error: the spec has 1 error; nothing was changed on the broker".to_string(),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} missing from:\n{stderr}");
    }
}

#[test]
fn apply_with_a_bad_spec_exits_2_before_connecting() {
    let bad = Temp::file("BAD.toml", BAD);
    // Port 1: any attempt to connect would fail with a connection error.
    let out = hopper(&["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1"], &bad.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains(&format!("┌─ {}:3:14", bad.0.display())), "{stderr}");
    assert!(stderr.contains("unknown queue type \"stream\""), "{stderr}");
    assert!(stderr.contains("nothing was changed on the broker"), "{stderr}");
    let lower = stderr.to_lowercase();
    for unexpected in ["127.0.0.1", "connect", "refused", "amqp://"] {
        assert!(!lower.contains(unexpected), "{unexpected:?} in stderr: the broker was contacted:\n{stderr}");
    }
}

#[test]
fn compile_on_a_directory_without_specs_exits_2() {
    let dir = Temp::dir("empty");
    std::fs::write(dir.0.join("README.md"), "not a spec\n").expect("write a non-spec file");
    let out = hopper(&["compile"], &dir.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let expected = format!("error: {} holds no *.toml files; give a spec file or a directory of them", dir.0.display());
    assert!(stderr.contains(&expected), "{expected:?} missing from:\n{stderr}");
}

/// Found by review: each was a wrong, missing or repeated diagnostic. Each test is named for
/// what hopper now does, not for the bug.
mod regressions {
    use hopper::spec::{self, SpecError};

    fn err(text: &str) -> SpecError {
        match spec::from_str("bad.toml", text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    fn all(e: &SpecError) -> Vec<(String, String, Option<String>)> {
        e.diagnostics.iter().map(|d| (e.position(d).to_string(), d.message.clone(), d.hint.clone())).collect()
    }

    /// One mistake, one diagnostic: the first is the real one; anything after it is a cascade.
    fn only_one(text: &str, message: &str) {
        let e = err(text);
        let got = all(&e);
        assert!(got[0].1.contains(message), "{got:#?}");
        assert_eq!(got.len(), 1, "cascade after {message:?}: {got:#?}");
    }

    #[test]
    fn regression_invalid_delay_without_max_attempts_is_reported_alone() {
        for (bad, message) in [
            ("\"5000\"", "delay \"5000\" has no unit"),
            ("\"5 parsecs\"", "\"5 parsecs\" is not a duration"),
            ("\"0s\"", "a delay must be longer than zero"),
            ("\"-5s\"", "a delay cannot be negative"),
            ("\"4000d\"", "delay \"4000d\" is longer than RabbitMQ's largest TTL"),
            ("\"1us\"", "delay \"1us\" is not a whole number of milliseconds"),
            ("30", "`delays` must be a string, not an integer"),
        ] {
            only_one(&format!("[topology.orders]\ndelays = [\"5s\", {bad}]\n"), message);
        }
    }

    #[test]
    fn regression_invalid_delay_with_max_attempts_is_reported_alone() {
        only_one("[topology.orders]\nmax_attempts = 3\ndelays = [\"5s\", \"30\"]\n", "delay \"30\" has no unit");
    }

    #[test]
    fn regression_delays_of_wrong_type_are_reported_alone() {
        only_one("[topology.orders]\nmax_attempts = 3\ndelays = \"5s\"\n", "`delays` must be an array of durations");
    }

    #[test]
    fn regression_backoff_of_wrong_type_is_reported_alone() {
        only_one("[topology.orders]\nmax_attempts = 3\nbackoff = \"1s\"\n", "`backoff` must be a table");
    }

    #[test]
    fn regression_backoff_initial_of_wrong_type_is_reported_alone() {
        only_one("[topology.orders]\nmax_attempts = 3\nbackoff = { initial = 1 }\n", "`initial` must be a string");
    }

    #[test]
    fn regression_max_attempts_beyond_i64_has_a_hint_and_is_reported_alone() {
        let e = err("[topology.orders]\nmax_attempts = 99999999999999999999\n");
        let got = all(&e);
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(got[0].2.is_some(), "no hint: {got:#?}");
    }

    #[test]
    fn regression_routing_key_over_255_bytes_is_pointed_at_with_a_hint() {
        let e = err(&format!("[topology.orders]\ndelays = [\"5s\"]\nrouting_keys = [\"{}\"]\n", "k".repeat(256)));
        let got = all(&e);
        assert_eq!(got[0].0, "bad.toml:3:17");
        assert!(got[0].2.is_some(), "no hint: {got:#?}");
    }

    #[test]
    fn regression_defaults_mistake_is_reported_once_not_per_topology() {
        only_one(
            "[defaults]\nmax_attempts = 0\n[topology.a]\ndelays = [\"5s\"]\n[topology.b]\ndelays = [\"5s\"]\n",
            "`max_attempts` must be at least 1, not 0",
        );
    }

    #[test]
    fn regression_dead_letter_queue_equal_to_the_main_queue_is_refused() {
        only_one(
            "[topology.orders]\ndelays = [\"5s\"]\ndead_letter_queue = \"orders\"\n",
            "the dead-letter queue `orders` is also the main queue",
        );
    }

    #[test]
    fn regression_dead_letter_queue_equal_to_a_wait_queue_is_refused() {
        only_one(
            "[topology.orders]\ndelays = [\"5s\"]\ndead_letter_queue = \"orders.wait-5s\"\n",
            "the dead-letter queue `orders.wait-5s` is also the wait queue of retry 1",
        );
    }

    #[test]
    fn regression_exchange_type_label_reads_not_a_valid_exchange_type() {
        let e = err("[topology.orders]\ndelays = [\"5s\"]\nexchange_type = \"fan-out\"\n");
        assert_eq!(e.diagnostics[0].label, "not a valid exchange type");
    }

    #[test]
    fn regression_infinite_multiplier_is_called_not_finite() {
        let e = err("[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1s\", multiplier = inf }\n");
        assert_eq!(e.diagnostics[0].message, "`multiplier` must be a finite number");
        assert_eq!(e.diagnostics[0].label, "not finite");
    }

    #[test]
    fn regression_delays_with_max_attempts_1_are_refused_as_never_used() {
        only_one(
            "[topology.orders]\nmax_attempts = 1\ndelays = [\"5s\", \"1m\"]\n",
            "delays are set but max_attempts = 1 means no retry",
        );
    }

    #[test]
    fn regression_one_queue_line_gives_one_diagnostic_at_that_line() {
        let text =
            "[topology.orders]\ndelays = [\"5s\"]\n\n[topology.orders2]\nqueue = \"orders\"\ndelays = [\"5s\"]\n";
        let e = err(text);
        let got = all(&e);
        assert!(got.iter().any(|g| g.0 == "bad.toml:5:9"), "nothing points at `queue = \"orders\"`: {got:#?}");
        assert_eq!(got.len(), 1, "{got:#?}");
    }

    #[test]
    fn regression_queue_name_over_255_is_reported_alone_not_with_its_derived_names() {
        only_one(
            &format!("[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\n", "q".repeat(256)),
            "the queue name is 256 bytes",
        );
    }

    #[test]
    fn regression_quorum_name_limit_counts_the_vhost_raw_as_rabbitmq_does() {
        // RabbitMQ's internal name is "<vhost>_<name>" with the vhost raw, "%2F" only for "/":
        // "a b" + "_" = 4 bytes, so a 251-byte queue name fits; hopper counts "a%20b_" = 6.
        let text = format!(
            "vhost = \"a b\"\n[topology.orders]\nmax_attempts = 1\nqueue = \"{}\"\ndead_letter_queue = \"d\"\nretry_exchange = \"r\"\ndead_letter_exchange = \"x\"\n",
            "q".repeat(251)
        );
        if let Err(e) = spec::from_str("ok.toml", &text) {
            panic!("{}", e.render_plain());
        }
    }
}
