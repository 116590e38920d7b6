//! The objects a broker holds (exchanges, queues, bindings) with normalised arguments and typed
//! identities. The compiled spec and the live broker are both described in these terms, so that
//! they can be compared; an object is identified by what RabbitMQ identifies it by, never by a
//! string made for people.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        /// Shared, not copied: the same name appears in a queue, its bindings and every network
        /// built from them, a million times in a large spec.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        /// As the text itself: quoted and escaped, as messages show a name (`{:?}`), so that a
        /// name can never end a line or rewrite the terminal.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl $name {
            pub fn new(name: impl Into<String>) -> Self {
                $name(Arc::from(name.into()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The name's text itself, shared: an argument naming this object holds it too.
            pub fn shared(&self) -> Arc<str> {
                self.0.clone()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name(Arc::from(""))
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            /// Straight from the text to the shared name, with no `String` made first.
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Text;
                impl serde::de::Visitor<'_> for Text {
                    type Value = Arc<str>;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Arc<str>, E> {
                        Ok(Arc::from(s))
                    }
                }
                d.deserialize_str(Text).map($name)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(Arc::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(Arc::from(s))
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &*self.0 == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == &*other.0
            }
        }
    };
}

name_type!(
    /// A queue's name within its vhost.
    QueueName
);
name_type!(
    /// An exchange's name within its vhost; the empty name is the default exchange.
    ExchangeName
);
name_type!(
    /// Who applies a spec (`owner` at the top of its files): the broker records which
    /// topologies, and which of their exchanges and queues, each owner made in a vhost.
    Owner
);
name_type!(
    /// A binding's routing key; a wait queue's return binding's is the queue's name, shared.
    RoutingKey
);

impl From<QueueName> for RoutingKey {
    fn from(q: QueueName) -> Self {
        RoutingKey(q.0)
    }
}

impl From<&QueueName> for RoutingKey {
    fn from(q: &QueueName) -> Self {
        RoutingKey(q.0.clone())
    }
}

impl ExchangeName {
    /// The default exchange, which routes to the queue named by the routing key.
    pub fn default_exchange() -> Self {
        ExchangeName(Arc::from(""))
    }

    pub fn is_default(&self) -> bool {
        self.0.is_empty()
    }
}

/// A character that can change what a terminal shows rather than show itself: a control
/// character (an escape sequence, a newline, a NUL) or a bidirectional or invisible format
/// character (U+202E turns the rest of a line around). Refused in a spec, escaped in output.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// An x-argument value. RabbitMQ compares every integer width as equal, so one integer type is
/// enough; strings are strings whatever AMQP type carried them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    /// Shared: the names a compiled queue's arguments hold are its topology's own.
    Str(Arc<str>),
    /// Anything else (a float, an array, a table), as the JSON RabbitMQ showed. hopper sets no
    /// such argument; it is kept so that it is compared and shown, never dropped.
    Other(String),
}

/// As a JSON value: a number as a number, a boolean as a boolean, and `Other` as the JSON it
/// was read as (a float stays a float), never as a quoted string.
impl Serialize for ArgValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ArgValue::Bool(b) => s.serialize_bool(*b),
            ArgValue::Int(n) => s.serialize_i64(*n),
            ArgValue::Str(text) => s.serialize_str(text),
            ArgValue::Other(json) => match serde_json::from_str::<serde_json::Value>(json) {
                Ok(value) => value.serialize(s),
                Err(_) => s.serialize_str(json),
            },
        }
    }
}

impl ArgValue {
    pub fn str(s: impl Into<Arc<str>>) -> ArgValue {
        ArgValue::Str(s.into())
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            ArgValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            ArgValue::Int(n) => Some(*n),
            _ => None,
        }
    }
}

/// As RabbitMQ shows a value: strings quoted, numbers bare.
impl fmt::Display for ArgValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgValue::Bool(b) => write!(f, "{b}"),
            ArgValue::Int(n) => write!(f, "{n}"),
            ArgValue::Str(s) => write!(f, "{:?}", s),
            ArgValue::Other(json) => f.write_str(json),
        }
    }
}

/// An argument's key: hopper's own are static, a broker's are read.
pub type ArgKey = Cow<'static, str>;

/// Arguments by key (`x-message-ttl`, ...), in key order. A sorted list rather than a map: a
/// queue has a handful of arguments, and a map per queue costs far more memory than the list.
/// Shared until changed: a network built from a spec holds the spec's arguments, not copies.
#[derive(Debug, Clone, Default)]
pub struct Arguments(Option<Arc<Vec<(ArgKey, ArgValue)>>>);

// Compared by their entries: no arguments is the same whether or not a list was ever made.
impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for Arguments {}

impl PartialOrd for Arguments {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Arguments {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.entries().cmp(other.entries())
    }
}

impl std::hash::Hash for Arguments {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.entries().hash(state);
    }
}

impl Arguments {
    pub const fn new() -> Self {
        Arguments(None)
    }

    fn entries(&self) -> &[(ArgKey, ArgValue)] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    fn entries_mut(&mut self) -> &mut Vec<(ArgKey, ArgValue)> {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries().binary_search_by(|(k, _)| k.as_ref().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&ArgValue> {
        self.position(key).ok().map(|i| &self.entries()[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key`, returning the value it replaces.
    pub fn insert(&mut self, key: impl Into<ArgKey>, value: ArgValue) -> Option<ArgValue> {
        let key = key.into();
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries_mut()[i].1, value)),
            Err(i) => {
                self.entries_mut().insert(i, (key, value));
                None
            }
        }
    }

    /// Sets `key` only where it is not set.
    pub fn insert_if_absent(&mut self, key: impl Into<ArgKey>, value: ArgValue) {
        let key = key.into();
        if let Err(i) = self.position(&key) {
            self.entries_mut().insert(i, (key, value));
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<ArgValue> {
        let i = self.position(key).ok()?;
        Some(self.entries_mut().remove(i).1)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries().iter().map(|(k, _)| k.as_ref())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ArgValue)> {
        self.entries().iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }
}

impl Arguments {
    /// From entries already in key order, each key once, as a listing's are once read.
    pub fn from_sorted(mut entries: Vec<(ArgKey, ArgValue)>) -> Arguments {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "keys sorted and unique");
        entries.shrink_to_fit();
        Arguments((!entries.is_empty()).then(|| Arc::new(entries)))
    }
}

impl<K: Into<ArgKey>> FromIterator<(K, ArgValue)> for Arguments {
    fn from_iter<I: IntoIterator<Item = (K, ArgValue)>>(iter: I) -> Self {
        let mut all: Vec<(ArgKey, ArgValue)> = iter.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // The last value of a key wins, as in a map.
        all.reverse();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.dedup_by(|later, earlier| later.0 == earlier.0);
        all.shrink_to_fit();
        Arguments((!all.is_empty()).then(|| Arc::new(all)))
    }
}

impl Serialize for Arguments {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// The arguments hopper reads and writes, by their RabbitMQ name. Names the code compares with
/// live arguments are written once, here.
pub mod arg {
    pub const QUEUE_TYPE: &str = "x-queue-type";
    pub const MESSAGE_TTL: &str = "x-message-ttl";
    pub const DEAD_LETTER_EXCHANGE: &str = "x-dead-letter-exchange";
    pub const DEAD_LETTER_ROUTING_KEY: &str = "x-dead-letter-routing-key";
    pub const DEAD_LETTER_STRATEGY: &str = "x-dead-letter-strategy";
    pub const OVERFLOW: &str = "x-overflow";
    pub const DELIVERY_LIMIT: &str = "x-delivery-limit";

    /// Every name above: read from a broker, one of them is shared rather than copied, and
    /// lookups compare it without following a pointer per queue.
    pub const NAMED: &[&str] = &[
        QUEUE_TYPE,
        MESSAGE_TTL,
        DEAD_LETTER_EXCHANGE,
        DEAD_LETTER_ROUTING_KEY,
        DEAD_LETTER_STRATEGY,
        OVERFLOW,
        DELIVERY_LIMIT,
    ];
}

/// What a queue is for in its topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Role {
    /// Consumers read it; `attempt` is the delivery number its messages are on (chain), or
    /// `None` when every attempt is delivered here (republish).
    Work { attempt: Option<u32> },
    /// Holds messages for one TTL, consumed by no one, then dead-letters them onward.
    Wait { hops: Vec<u32>, delay: String },
    /// Terminal: where messages go after their last attempt.
    DeadLetter,
}

/// The part a queue plays, without the details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Work,
    Wait,
    DeadLetter,
}

impl Role {
    pub fn kind(&self) -> RoleKind {
        match self {
            Role::Work { .. } => RoleKind::Work,
            Role::Wait { .. } => RoleKind::Wait,
            Role::DeadLetter => RoleKind::DeadLetter,
        }
    }

    /// For people: "main queue", "work queue of attempt 3", ...
    pub fn describe(&self) -> String {
        match self {
            Role::Work { attempt: None | Some(1) } => "main queue".into(),
            Role::Work { attempt: Some(n) } => format!("work queue of attempt {n}"),
            Role::Wait { hops, .. } => {
                let hops: Vec<String> = hops.iter().map(u32::to_string).collect();
                format!("wait queue of retry {}", hops.join(", "))
            }
            Role::DeadLetter => "dead-letter queue".into(),
        }
    }
}

/// A queue's type as RabbitMQ names it, read once where text comes in (a listing's `type`, an
/// `x-queue-type` argument): classic, quorum, stream, or a type of a later broker or a plugin,
/// kept as its own text so that diff and inspect show it exactly rather than a guess.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum QueueType {
    Classic,
    Quorum,
    Stream,
    Other(String),
}

impl QueueType {
    /// RabbitMQ's names of the types it knows, written once: parsed from and rendered as these.
    pub const CLASSIC: &'static str = "classic";
    pub const QUORUM: &'static str = "quorum";
    pub const STREAM: &'static str = "stream";

    /// The types a name parses to; every other is `Other`.
    pub const KNOWN: [QueueType; 3] = [QueueType::Classic, QueueType::Quorum, QueueType::Stream];

    pub fn as_str(&self) -> &str {
        match self {
            QueueType::Classic => Self::CLASSIC,
            QueueType::Quorum => Self::QUORUM,
            QueueType::Stream => Self::STREAM,
            QueueType::Other(name) => name,
        }
    }

    /// The type RabbitMQ takes a queue with these arguments to be: its `x-queue-type`, or
    /// classic without one (brokers before 3.11 list queues declared without it so). A value
    /// that is not text is no type RabbitMQ names, and is kept as it shows.
    pub fn of(arguments: &Arguments) -> QueueType {
        arguments.get(arg::QUEUE_TYPE).map_or(QueueType::Classic, QueueType::of_value)
    }

    /// The type an `x-queue-type` value names.
    pub fn of_value(value: &ArgValue) -> QueueType {
        match value {
            ArgValue::Str(name) => QueueType::from(&**name),
            other => QueueType::Other(other.to_string()),
        }
    }

    /// The argument that declares a queue of this type.
    pub fn argument(&self) -> ArgValue {
        ArgValue::str(self.as_str())
    }
}

impl From<&str> for QueueType {
    fn from(name: &str) -> Self {
        match name {
            Self::CLASSIC => QueueType::Classic,
            Self::QUORUM => QueueType::Quorum,
            Self::STREAM => QueueType::Stream,
            other => QueueType::Other(other.to_string()),
        }
    }
}

impl fmt::Display for QueueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for QueueType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Queue {
    pub name: QueueName,
    pub durable: bool,
    pub arguments: Arguments,
    pub role: Role,
}

/// An exchange type: the three hopper declares, headers, or a plugin's (`x-consistent-hash`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExchangeType {
    Direct,
    Topic,
    Fanout,
    Headers,
    Other(String),
}

impl ExchangeType {
    pub fn as_str(&self) -> &str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Topic => "topic",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Headers => "headers",
            ExchangeType::Other(s) => s,
        }
    }
}

impl From<&str> for ExchangeType {
    fn from(s: &str) -> Self {
        match s {
            "direct" => ExchangeType::Direct,
            "topic" => ExchangeType::Topic,
            "fanout" => ExchangeType::Fanout,
            "headers" => ExchangeType::Headers,
            other => ExchangeType::Other(other.to_string()),
        }
    }
}

impl PartialEq<&str> for ExchangeType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ExchangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for ExchangeType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exchange {
    pub name: ExchangeName,
    #[serde(rename = "type")]
    pub kind: ExchangeType,
    pub durable: bool,
}

/// Where a binding delivers: a queue, or another exchange.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "destination_type", content = "destination", rename_all = "snake_case")]
pub enum Destination {
    Queue(QueueName),
    Exchange(ExchangeName),
}

impl Destination {
    pub fn name(&self) -> &str {
        match self {
            Destination::Queue(q) => q,
            Destination::Exchange(e) => e,
        }
    }

    pub fn queue(&self) -> Option<&QueueName> {
        match self {
            Destination::Queue(q) => Some(q),
            Destination::Exchange(_) => None,
        }
    }
}

/// A binding is identified by all of it: RabbitMQ keeps two bindings that differ only in their
/// arguments as two bindings.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Binding {
    /// The exchange messages come from.
    pub source: ExchangeName,
    #[serde(flatten)]
    pub destination: Destination,
    pub routing_key: RoutingKey,
    #[serde(skip_serializing_if = "Arguments::is_empty")]
    pub arguments: Arguments,
}

impl Binding {
    /// A binding from an exchange to a queue, without arguments: every binding hopper declares.
    pub fn to_queue(
        source: impl Into<ExchangeName>,
        queue: impl Into<QueueName>,
        routing_key: impl Into<RoutingKey>,
    ) -> Self {
        Binding {
            source: source.into(),
            destination: Destination::Queue(queue.into()),
            routing_key: routing_key.into(),
            arguments: Arguments::new(),
        }
    }
}

/// For people only; never an identity.
impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {} ({:?})", self.source, self.destination.name(), self.routing_key)?;
        if !self.arguments.is_empty() {
            let args: Vec<String> = self.arguments.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, " [{}]", args.join(", "))?;
        }
        Ok(())
    }
}

/// One thing to declare. A compiled topology lists them sinks first: nothing is declared before
/// the objects its dead letters flow into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "object", rename_all = "snake_case")]
pub enum Object {
    Exchange(Exchange),
    Queue(Queue),
    Binding(Binding),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    Exchange,
    Queue,
    Binding,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Exchange => "exchange",
            ObjectKind::Queue => "queue",
            ObjectKind::Binding => "binding",
        }
    }
}

impl PartialEq<&str> for ObjectKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// What identifies an object in a vhost: its kind and its name, or all of a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key<'a> {
    Exchange(&'a ExchangeName),
    Queue(&'a QueueName),
    Binding(&'a Binding),
}

impl Object {
    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::Exchange(_) => ObjectKind::Exchange,
            Object::Queue(_) => ObjectKind::Queue,
            Object::Binding(_) => ObjectKind::Binding,
        }
    }

    pub fn key(&self) -> Key<'_> {
        match self {
            Object::Exchange(e) => Key::Exchange(&e.name),
            Object::Queue(q) => Key::Queue(&q.name),
            Object::Binding(b) => Key::Binding(b),
        }
    }
}

/// For people only: a name, or a binding as `source -> destination ("key")`.
impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::Exchange(e) => write!(f, "{}", e.name),
            Object::Queue(q) => write!(f, "{}", q.name),
            Object::Binding(b) => write!(f, "{b}"),
        }
    }
}

/// What can differ between an object on the broker and the spec.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Property {
    /// An x-argument, such as `x-message-ttl`.
    Argument(String),
    /// An exchange's type.
    Type,
    Durable,
    AutoDelete,
    /// An internal exchange takes no publish from a client: producers' messages are refused.
    Internal,
    /// Who recorded the object as theirs (`plan::ownership`).
    Owner,
}

impl Property {
    pub fn as_str(&self) -> &str {
        match self {
            Property::Argument(a) => a,
            Property::Type => "type",
            Property::Durable => "durable",
            Property::AutoDelete => "auto_delete",
            Property::Internal => "internal",
            Property::Owner => "owner",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Property {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One argument (or property) that differs between the broker and the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    #[serde(rename = "argument")]
    pub property: Property,
    /// `None`: not set.
    pub live: Option<ArgValue>,
    pub spec: Option<ArgValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_that_print_alike_are_still_two_bindings() {
        // `p -> q -> r ("q -> r")` twice, as text; two bindings to RabbitMQ.
        let a = Binding::to_queue("p -> q", "r", "q -> r");
        let b = Binding::to_queue("p", "q -> r", "q -> r");
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(Object::Binding(a).key(), Object::Binding(b).key());
    }

    #[test]
    fn binding_arguments_are_part_of_its_identity() {
        let plain = Binding::to_queue("x", "q", "k");
        let mut with = plain.clone();
        with.arguments.insert("x-match", ArgValue::str("all"));
        assert_ne!(plain, with);
    }

    /// `QueueType::KNOWN` is kept by hand: a type added to the enum and not to the list fails here.
    #[test]
    fn every_known_queue_type_is_listed() {
        use strum::IntoEnumIterator;
        let known: Vec<QueueType> = QueueType::iter().filter(|t| !matches!(t, QueueType::Other(_))).collect();
        assert_eq!(known, QueueType::KNOWN);
    }

    #[test]
    fn a_queue_type_is_read_from_its_argument() {
        let with = |v: ArgValue| QueueType::of(&Arguments::from_iter([(arg::QUEUE_TYPE, v)]));
        assert_eq!(QueueType::of(&Arguments::new()), QueueType::Classic);
        assert_eq!(with(ArgValue::str("quorum")), QueueType::Quorum);
        assert_eq!(with(ArgValue::str("stream")), QueueType::Stream);
        // A type hopper does not know is kept, not guessed; so is a value that is not text.
        assert_eq!(with(ArgValue::str("Quorum")), QueueType::Other("Quorum".into()));
        assert_eq!(with(ArgValue::Int(1)), QueueType::Other("1".into()));
        assert_eq!(serde_json::to_value(QueueType::Other("x-delayed".into())).unwrap(), serde_json::json!("x-delayed"));
    }

    proptest::proptest! {
        /// Every name is read as a type that renders as the same name: nothing a broker says is
        /// lost, and the names RabbitMQ knows are never `Other`.
        #[test]
        fn queue_type_names_round_trip(name in "[a-z_-]{0,10}|classic|quorum|stream") {
            let t = QueueType::from(name.as_str());
            proptest::prop_assert_eq!(t.as_str(), name.as_str());
            proptest::prop_assert_eq!(matches!(t, QueueType::Other(_)), !QueueType::KNOWN.iter().any(|k| k.as_str() == name));
            proptest::prop_assert_eq!(QueueType::of(&Arguments::from_iter([(arg::QUEUE_TYPE, t.argument())])), t);
        }
    }

    /// JSON output shows values as JSON values: what the broker gave as a float or an array is
    /// not turned into a string.
    #[test]
    fn argument_values_are_json_values() {
        let json = |v: ArgValue| serde_json::to_value(v).unwrap();
        assert_eq!(json(ArgValue::Int(5)), serde_json::json!(5));
        assert_eq!(json(ArgValue::Bool(true)), serde_json::json!(true));
        assert_eq!(json(ArgValue::str("5")), serde_json::json!("5"));
        assert_eq!(json(ArgValue::Other("1.5".into())), serde_json::json!(1.5));
        assert_eq!(json(ArgValue::Other("[\"a\",1]".into())), serde_json::json!(["a", 1]));
    }
}
