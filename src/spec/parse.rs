//! From TOML text to drafts: every key known, every value of the right type, every position kept.
//! Values are checked for meaning in `validate`.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::keys::{self, Key};
use crate::diagnostic::{Diagnostic, FileId};
use crate::topology::duration;

/// A value and where it was written.
#[derive(Debug, Clone)]
pub(super) struct Loc<T> {
    pub value: T,
    pub file: FileId,
    pub span: Range<usize>,
}

impl<T> Loc<T> {
    pub fn diag(&self, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(self.file, self.span.clone(), message)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Backoff {
    pub initial: Option<Loc<Duration>>,
    pub multiplier: Option<Loc<f64>>,
    pub max: Option<Loc<Duration>>,
    /// `exponential` (the default) or `linear`.
    pub shape: Option<Loc<String>>,
}

/// `idempotency_key` as written: `"message_id"` (checked in `validate`) or `{ header = "..." }`.
#[derive(Debug, Clone)]
pub(super) enum KeyDraft {
    Named(Loc<String>),
    Header(Loc<String>),
}

/// The fields a `[topology.NAME]` or `[defaults]` table may set; `None` where it is silent.
#[derive(Debug, Clone, Default)]
pub(super) struct Fields {
    pub exchange: Option<Loc<String>>,
    pub exchange_owner: Option<Loc<String>>,
    pub exchange_type: Option<Loc<String>>,
    pub routing_keys: Option<Loc<Vec<Loc<String>>>>,
    pub delays: Option<Loc<Vec<Loc<Duration>>>>,
    pub max_attempts: Option<Loc<i64>>,
    pub backoff: Option<Loc<Backoff>>,
    pub strategy: Option<Loc<String>>,
    pub queue_type: Option<Loc<String>>,
    pub queue: Option<Loc<String>>,
    pub retry_exchange: Option<Loc<String>>,
    pub dead_letter_exchange: Option<Loc<String>>,
    pub dead_letter_queue: Option<Loc<String>>,
    pub delivery_limit: Option<Loc<i64>>,
    pub jitter: Option<Loc<f64>>,
    pub jitter_buckets: Option<Loc<i64>>,
    pub idempotency_key: Option<KeyDraft>,
    /// Keys whose value was wrong and already reported: their absence must not be reported again.
    pub invalid: BTreeSet<&'static str>,
}

impl Fields {
    /// The topology's own value where it has one, the default's otherwise. `delays` and
    /// `backoff` are two ways to say one thing: a topology's own one replaces either default.
    fn or(self, defaults: &Fields) -> Fields {
        let own_schedule = self.delays.is_some() || self.backoff.is_some();
        Fields {
            exchange: self.exchange.or_else(|| defaults.exchange.clone()),
            exchange_owner: self.exchange_owner.or_else(|| defaults.exchange_owner.clone()),
            exchange_type: self.exchange_type.or_else(|| defaults.exchange_type.clone()),
            routing_keys: self.routing_keys.or_else(|| defaults.routing_keys.clone()),
            delays: if own_schedule { self.delays } else { defaults.delays.clone() },
            max_attempts: self.max_attempts.or_else(|| defaults.max_attempts.clone()),
            backoff: if own_schedule { self.backoff } else { defaults.backoff.clone() },
            strategy: self.strategy.or_else(|| defaults.strategy.clone()),
            queue_type: self.queue_type.or_else(|| defaults.queue_type.clone()),
            queue: self.queue.or_else(|| defaults.queue.clone()),
            retry_exchange: self.retry_exchange.or_else(|| defaults.retry_exchange.clone()),
            dead_letter_exchange: self.dead_letter_exchange.or_else(|| defaults.dead_letter_exchange.clone()),
            dead_letter_queue: self.dead_letter_queue.or_else(|| defaults.dead_letter_queue.clone()),
            delivery_limit: self.delivery_limit.or_else(|| defaults.delivery_limit.clone()),
            jitter: self.jitter.or_else(|| defaults.jitter.clone()),
            jitter_buckets: self.jitter_buckets.or_else(|| defaults.jitter_buckets.clone()),
            idempotency_key: self.idempotency_key.or_else(|| defaults.idempotency_key.clone()),
            invalid: self.invalid.union(&defaults.invalid).copied().collect(),
        }
    }
}

/// A topology as written, defaults applied, not yet checked for meaning.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    pub name: Loc<String>,
    pub vhost: Option<Loc<String>>,
    pub owner: Option<Loc<String>>,
    pub fields: Fields,
    /// Keys whose value comes from `[defaults]`.
    pub inherited: Inherited,
}

/// Which keys a topology took from `[defaults]`: a default that does not fit a topology is
/// reported at the topology, where it can be overridden.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Inherited {
    pub delays: bool,
    pub routing_keys: bool,
    pub delivery_limit: bool,
    pub jitter: bool,
}

pub(super) fn parse_file(file: FileId, text: &str, diags: &mut Vec<Diagnostic>) -> Vec<Draft> {
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            diags.push(
                Diagnostic::new(file, span, format!("invalid TOML: {}", e.message().trim_end()))
                    .label("here")
                    .hint("see https://toml.io for the syntax"),
            );
            return Vec::new();
        }
    };
    let root = root.get_ref();
    let mut p = Parser { file, diags };
    p.check_keys(root, keys::TOP_LEVEL, "the top level", top_level_hint);

    let vhost = root.get("vhost").and_then(|v| p.string("vhost", v, keys::TOP_LEVEL));
    let owner = root.get("owner").and_then(|v| p.string("owner", v, keys::TOP_LEVEL));
    let defaults = root
        .get("defaults")
        .and_then(|v| p.table("defaults", v, keys::TOP_LEVEL))
        .map(|t| p.fields(t, "[defaults]"))
        .unwrap_or_default();

    let mut drafts = Vec::new();
    let Some(topology) = root.get("topology") else {
        p.diags.push(
            Diagnostic::new(file, 0..0, "this file declares no topology")
                .label("no [topology.NAME] section")
                .hint("add a section such as [topology.orders] with delays and max_attempts"),
        );
        return drafts;
    };
    let Some(topologies) = p.table("topology", topology, keys::TOP_LEVEL) else {
        return drafts;
    };
    if topologies.is_empty() {
        let key = root.get_key_value("topology").map_or(0..0, |(k, _)| k.span());
        p.diags.push(
            Diagnostic::new(file, key, "`[topology]` declares no topology")
                .label("no [topology.NAME] under it")
                .hint("declare each topology as a section of its own, such as [topology.orders]"),
        );
        return drafts;
    }
    for (key, value) in topologies.iter() {
        let name = Loc { value: key.get_ref().to_string(), file, span: key.span() };
        let DeValue::Table(table) = value.get_ref() else {
            p.diags.push(
                name.diag(format!("`topology.{}` must be a table", name.value))
                    .label("not a table")
                    .hint(format!("declare it as a section: [topology.{}]", name.value)),
            );
            continue;
        };
        let own = p.fields(table, &format!("[topology.{}]", name.value));
        let inherited = Inherited {
            delays: own.delays.is_none() && own.backoff.is_none() && defaults.delays.is_some(),
            routing_keys: own.routing_keys.is_none() && defaults.routing_keys.is_some(),
            delivery_limit: own.delivery_limit.is_none() && defaults.delivery_limit.is_some(),
            jitter: own.jitter.is_none() && defaults.jitter.is_some(),
        };
        drafts.push(Draft { name, vhost: vhost.clone(), owner: owner.clone(), fields: own.or(&defaults), inherited });
    }
    drafts
}

fn top_level_hint(key: &str) -> Option<String> {
    keys::TOPOLOGY
        .iter()
        .any(|k| k.name == key)
        .then(|| format!("`{key}` belongs inside a [topology.NAME] or [defaults] section"))
}

struct Parser<'d> {
    file: FileId,
    diags: &'d mut Vec<Diagnostic>,
}

type Value<'i> = Spanned<DeValue<'i>>;

impl Parser<'_> {
    fn loc<T>(&self, value: T, span: Range<usize>) -> Loc<T> {
        Loc { value, file: self.file, span }
    }

    fn check_keys(&mut self, table: &DeTable, known: &[Key], context: &str, extra_hint: fn(&str) -> Option<String>) {
        for (key, _) in table.iter() {
            let name: &str = key.get_ref();
            if known.iter().any(|k| k.name == name) {
                continue;
            }
            let hint = extra_hint(name)
                .or_else(|| closest(name, known).map(|k| format!("did you mean `{k}`?")))
                .unwrap_or_else(|| {
                    let names: Vec<_> = known.iter().map(|k| format!("`{}`", k.name)).collect();
                    format!("known keys here: {}", names.join(", "))
                });
            self.diags.push(
                Diagnostic::new(self.file, key.span(), format!("unknown key `{name}` in {context}"))
                    .label("unknown key")
                    .hint(hint),
            );
        }
    }

    fn type_error(&mut self, key: &str, value: &Value, expected: &str, known: &[Key]) {
        let example = Key::find(known, key).map_or("", |k| k.example);
        self.diags.push(
            Diagnostic::new(
                self.file,
                value.span(),
                format!("`{key}` must be {expected}, not {}", describe(value.get_ref())),
            )
            .label(format!("expected {expected}"))
            .hint(format!("for example: {example}")),
        );
    }

    fn string(&mut self, key: &str, value: &Value, known: &[Key]) -> Option<Loc<String>> {
        match value.get_ref() {
            DeValue::String(s) => Some(self.loc(s.to_string(), value.span())),
            _ => {
                self.type_error(key, value, "a string", known);
                None
            }
        }
    }

    fn integer(&mut self, key: &str, value: &Value, known: &[Key]) -> Option<Loc<i64>> {
        match value.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(self.loc(n, value.span())),
                Err(_) => {
                    self.diags.push(
                        Diagnostic::new(self.file, value.span(), format!("`{key}` is too large"))
                            .label("out of range")
                            .hint(match key {
                                "max_attempts" => format!("max_attempts is at most {}", super::MAX_ATTEMPTS),
                                _ => "use a value that fits in a signed 64-bit integer".to_string(),
                            }),
                    );
                    None
                }
            },
            _ => {
                self.type_error(key, value, "an integer", known);
                None
            }
        }
    }

    fn number(&mut self, key: &str, value: &Value, known: &[Key]) -> Option<Loc<f64>> {
        let parsed = match value.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).ok().map(|n| n as f64),
            _ => None,
        };
        match parsed {
            Some(n) if n.is_finite() => Some(self.loc(n, value.span())),
            Some(_) => {
                self.diags.push(
                    Diagnostic::new(self.file, value.span(), format!("`{key}` must be a finite number"))
                        .label("not finite")
                        .hint("for example: multiplier = 2.0"),
                );
                None
            }
            _ => {
                self.type_error(key, value, "a number", known);
                None
            }
        }
    }

    fn duration(&mut self, key: &str, value: &Value, known: &[Key]) -> Option<Loc<Duration>> {
        let text = self.string(key, value, known)?;
        match duration::parse(&text.value) {
            Ok(d) => Some(self.loc(d, text.span)),
            Err((message, hint)) => {
                self.diags.push(text.diag(message).label("invalid delay").hint(hint));
                None
            }
        }
    }

    fn table<'a, 'i>(&mut self, key: &str, value: &'a Value<'i>, known: &[Key]) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                self.type_error(key, value, "a table", known);
                None
            }
        }
    }

    fn array<'a, 'i>(&mut self, key: &str, value: &'a Value<'i>, expected: &str) -> Option<&'a [Value<'i>]> {
        match value.get_ref() {
            DeValue::Array(a) => Some(a.as_ref()),
            _ => {
                self.type_error(key, value, expected, keys::TOPOLOGY);
                None
            }
        }
    }

    fn fields(&mut self, table: &DeTable, context: &str) -> Fields {
        self.check_keys(table, keys::TOPOLOGY, context, |key| {
            matches!(key, "vhost" | "owner")
                .then(|| format!("`{key}` is set once per file, at the top, before any section"))
        });
        let k = keys::TOPOLOGY;
        let mut f = Fields::default();
        for (key, value) in table.iter() {
            let Some(key) = Key::find(keys::TOPOLOGY, key.get_ref()).map(|k| k.name) else { continue };
            let before = self.diags.len();
            match key {
                "exchange" => f.exchange = self.string(key, value, k),
                "exchange_owner" => f.exchange_owner = self.string(key, value, k),
                "exchange_type" => f.exchange_type = self.string(key, value, k),
                "strategy" => f.strategy = self.string(key, value, k),
                "queue_type" => f.queue_type = self.string(key, value, k),
                "queue" => f.queue = self.string(key, value, k),
                "retry_exchange" => f.retry_exchange = self.string(key, value, k),
                "dead_letter_exchange" => f.dead_letter_exchange = self.string(key, value, k),
                "dead_letter_queue" => f.dead_letter_queue = self.string(key, value, k),
                "max_attempts" => f.max_attempts = self.integer(key, value, k),
                "delivery_limit" => f.delivery_limit = self.integer(key, value, k),
                "jitter" => f.jitter = self.number(key, value, k),
                "jitter_buckets" => f.jitter_buckets = self.integer(key, value, k),
                "routing_keys" => {
                    if let Some(items) = self.array(key, value, "an array of strings") {
                        let keys: Option<Vec<_>> = items.iter().map(|v| self.string(key, v, k)).collect();
                        f.routing_keys = keys.map(|keys| self.loc(keys, value.span()));
                    }
                }
                "delays" => {
                    if let Some(items) = self.array(key, value, "an array of durations") {
                        let delays: Option<Vec<_>> = items.iter().map(|v| self.duration(key, v, k)).collect();
                        f.delays = delays.map(|delays| self.loc(delays, value.span()));
                    }
                }
                "backoff" => {
                    if let Some(t) = self.table(key, value, k) {
                        f.backoff = Some(self.backoff(t, value.span(), context));
                    }
                }
                "idempotency_key" => f.idempotency_key = self.idempotency_key(value, context),
                _ => {}
            }
            if self.diags.len() > before {
                f.invalid.insert(key);
            }
        }
        f
    }

    fn backoff(&mut self, table: &DeTable, span: Range<usize>, context: &str) -> Loc<Backoff> {
        self.check_keys(table, keys::BACKOFF, &format!("`backoff` of {context}"), |_| None);
        let k = keys::BACKOFF;
        let mut b = Backoff { initial: None, multiplier: None, max: None, shape: None };
        for (key, value) in table.iter() {
            let key: &str = key.get_ref();
            match key {
                "initial" => b.initial = self.duration(key, value, k),
                "max" => b.max = self.duration(key, value, k),
                "multiplier" => b.multiplier = self.number(key, value, k),
                "shape" => b.shape = self.string(key, value, k),
                _ => {}
            }
        }
        self.loc(b, span)
    }
}

impl Parser<'_> {
    fn idempotency_key(&mut self, value: &Value, context: &str) -> Option<KeyDraft> {
        let key = "idempotency_key";
        match value.get_ref() {
            DeValue::String(_) => self.string(key, value, keys::TOPOLOGY).map(KeyDraft::Named),
            DeValue::Table(table) => {
                self.check_keys(table, keys::IDEMPOTENCY_KEY, &format!("`idempotency_key` of {context}"), |_| None);
                match table.get("header") {
                    Some(header) => self.string("header", header, keys::IDEMPOTENCY_KEY).map(KeyDraft::Header),
                    None => {
                        self.diags.push(
                            Diagnostic::new(self.file, value.span(), "`idempotency_key` names no header")
                                .label("no `header`")
                                .hint(r#"name the header producers set: idempotency_key = { header = "order-id" }"#),
                        );
                        None
                    }
                }
            }
            _ => {
                self.type_error(key, value, "a string or a table", keys::TOPOLOGY);
                None
            }
        }
    }
}

fn describe(value: &DeValue) -> Cow<'static, str> {
    match value {
        DeValue::String(s) => format!("the string \"{s}\"").into(),
        DeValue::Integer(_) => "an integer".into(),
        DeValue::Float(_) => "a float".into(),
        DeValue::Boolean(_) => "a boolean".into(),
        DeValue::Datetime(_) => "a date".into(),
        DeValue::Array(_) => "an array".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// The known key a misspelt one most likely meant.
fn closest(name: &str, known: &[Key]) -> Option<&'static str> {
    known
        .iter()
        .map(|k| (k.name, strsim::jaro_winkler(name, k.name)))
        .filter(|(_, score)| *score > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the table is read, and inherited from `[defaults]`: a key added to the
    /// table but not to `fields` or `Fields::or` would be accepted and then silently dropped.
    #[test]
    fn every_key_is_read_and_inherited() {
        let empty = parse_file(0, "[topology.t]\n", &mut Vec::new());
        for key in keys::TOPOLOGY {
            let mut diags = Vec::new();
            let drafts = parse_file(0, &format!("[defaults]\n{}\n[topology.t]\n", key.example), &mut diags);
            assert!(diags.is_empty(), "{}: {diags:?}", key.name);
            assert_ne!(
                format!("{:?}", drafts[0].fields),
                format!("{:?}", empty[0].fields),
                "`{}` in [defaults] does not reach the topology",
                key.name
            );
        }
    }
}
