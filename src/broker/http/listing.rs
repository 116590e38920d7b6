//! What the management API returns, as hopper reads it: only the fields hopper uses.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::live::LiveExchange;
use crate::model::{ArgKey, ArgValue, Arguments, Binding, Destination, ExchangeName, QueueName, QueueType, arg};

#[derive(Debug, Deserialize)]
pub struct Overview {
    pub cluster_name: String,
    pub rabbitmq_version: String,
    /// The node that answered.
    #[serde(default)]
    pub node: String,
}

/// The fields of an exchange's listing that `ExchangeInfo` reads, asked for as its `columns`.
pub(super) const EXCHANGE_COLUMNS: &[&str] = &["name", "type", "durable", "auto_delete", "internal", "arguments"];

#[derive(Debug, Deserialize)]
pub struct ExchangeInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    /// An internal exchange refuses publishes from clients.
    #[serde(default)]
    pub internal: bool,
    #[serde(default)]
    pub arguments: ListedArguments,
}

/// A queue as listed, read by `ListedQueue` (RabbitMQ 3.10 may list a field twice, which a
/// derived reader refuses); a field the listing leaves out has its default.
#[derive(Debug)]
pub struct QueueInfo {
    pub name: QueueName,
    /// The listing's `type`, which brokers list even where a queue has no `x-queue-type`.
    pub kind: QueueType,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Arguments,
    /// Absent until the broker has collected the queue's stats once.
    pub messages: u64,
    pub messages_unacknowledged: u64,
    pub consumers: u64,
    /// A classic queue's node; a quorum queue's leader on some releases.
    pub node: Option<String>,
    /// A classic queue whose node is down is `down`.
    pub state: Option<Cow<'static, str>>,
    /// A quorum queue's leader, members and the members the broker counts online (this lags
    /// behind a node that stopped by seconds, so a member also counts offline when its node does
    /// not run).
    pub leader: Option<String>,
    pub members: Option<Vec<String>>,
    pub online: Option<Vec<String>>,
}

/// The most room made for a body before it arrives: the largest listing of 10,000 topologies,
/// their 70,000 bindings, is about 22 MB.
pub(super) const BODY_HINT_CAP: u64 = 64 << 20;

/// The fields of a queue's listing that `QueueInfo` reads, also as the `columns` asked for
/// with counts. A field added to `QueueInfo` is also named here, in `QueueField` and in
/// `ListedQueue`'s reader, and in `UNCOUNTED_QUEUE_FIELDS` unless it is a count.
pub(super) const QUEUE_FIELDS: &[&str] = &[
    "name",
    "type",
    "durable",
    "auto_delete",
    "arguments",
    "messages",
    "messages_unacknowledged",
    "consumers",
    "node",
    "state",
    "leader",
    "members",
    "online",
];

/// The same without the counts: the `columns` of a listing without statistics. A queue's
/// `state` is listed without statistics too, and says when a classic queue is down on a node
/// that runs.
pub(super) const UNCOUNTED_QUEUE_FIELDS: &[&str] =
    &["name", "type", "durable", "auto_delete", "arguments", "node", "state", "leader", "members", "online"];

/// A field of a queue's listing that `QueueInfo` reads, named as the listing names it.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
pub(super) enum QueueField {
    Name,
    Type,
    Durable,
    AutoDelete,
    Arguments,
    Messages,
    MessagesUnacknowledged,
    Consumers,
    Node,
    State,
    Leader,
    Members,
    Online,
    /// A queue with statistics is listed with dozens of fields (rates, memory, garbage
    /// collection): skipped, not kept, they were most of `inspect`'s memory.
    #[serde(other)]
    Other,
}

/// A queue of a listing, read field by field as it is parsed, on the thread that received the
/// listing: at 50,000 queues the slower listings are still on their way meanwhile. A field
/// listed twice has its last value, except `online`: RabbitMQ 3.10 lists a quorum queue with a
/// member offline with `online` twice, the members online now and at its last statistics, and a
/// member is online only if every listing of it says so. A derived reader refuses such an
/// object.
pub(super) struct ListedQueue(pub(super) QueueInfo);

impl<'de> Deserialize<'de> for ListedQueue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedQueue, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = QueueInfo;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a queue")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<QueueInfo, A::Error> {
                use serde::de::Error;
                let (mut name, mut durable, mut auto_delete) = (None, None, None);
                let mut unreadable_online = None;
                let mut q = QueueInfo {
                    name: QueueName::default(),
                    kind: QueueType::Classic,
                    durable: false,
                    auto_delete: false,
                    arguments: Arguments::new(),
                    messages: 0,
                    messages_unacknowledged: 0,
                    consumers: 0,
                    node: None,
                    state: None,
                    leader: None,
                    members: None,
                    online: None,
                };
                while let Some(field) = map.next_key::<QueueField>()? {
                    match field {
                        QueueField::Name => name = Some(map.next_value()?),
                        QueueField::Type => q.kind = QueueType::from(&*map.next_value::<Text>()?.0),
                        QueueField::Durable => durable = Some(map.next_value()?),
                        QueueField::AutoDelete => auto_delete = Some(map.next_value()?),
                        QueueField::Arguments => q.arguments = map.next_value::<ListedArguments>()?.0,
                        QueueField::Messages => q.messages = map.next_value()?,
                        QueueField::MessagesUnacknowledged => q.messages_unacknowledged = map.next_value()?,
                        QueueField::Consumers => q.consumers = map.next_value()?,
                        QueueField::Node => q.node = map.next_value()?,
                        QueueField::State => q.state = map.next_value::<Option<Text>>()?.map(|s| known(s.0, STATES)),
                        QueueField::Leader => q.leader = map.next_value()?,
                        QueueField::Members => q.members = map.next_value()?,
                        // Not known is `null` or `""` (RabbitMQ's `''`, what a queue type's
                        // `i/2` answers for an item it has no value for), as if not listed.
                        // Anything else but a list of node names is refused: read as "no
                        // member online", it would warn that every member is down.
                        QueueField::Online => {
                            let listed = match map.next_value::<Value>()? {
                                Value::Null => continue,
                                Value::String(s) if s.is_empty() => continue,
                                value => match serde_json::from_value::<Vec<String>>(value.clone()) {
                                    Ok(listed) => listed,
                                    // Refused once the name is known, which may come later.
                                    Err(_) => {
                                        unreadable_online.get_or_insert(value);
                                        continue;
                                    }
                                },
                            };
                            q.online = Some(match q.online.take() {
                                None => listed,
                                Some(before) => before.into_iter().filter(|m| listed.contains(m)).collect(),
                            });
                        }
                        QueueField::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                q.name = name.ok_or_else(|| A::Error::missing_field("name"))?;
                if let Some(value) = unreadable_online {
                    // Debug-quoted: a name's quotes and control characters are escaped.
                    return Err(A::Error::custom(format!(
                        "queue {:?}: `online` is {value}, not a list of node names",
                        q.name
                    )));
                }
                q.durable = durable.ok_or_else(|| A::Error::missing_field("durable"))?;
                q.auto_delete = auto_delete.ok_or_else(|| A::Error::missing_field("auto_delete"))?;
                Ok(q)
            }
        }
        d.deserialize_map(Fields).map(ListedQueue).map_err(|e| {
            // The parser adds the position again to the error made here.
            let e = e.to_string();
            serde::de::Error::custom(format!(
                "the management API listed a queue hopper cannot read: {}",
                without_position(&e)
            ))
        })
    }
}

/// Text of an answer, borrowed from it where it holds no escapes.
#[derive(Deserialize)]
pub(super) struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Queue states as listed: one of these is shared, not made per queue.
pub(super) const STATES: &[&str] = &["running", "down", "crashed", "stopped", "minority"];

/// `text` as one of `known`, shared, or else as its own copy.
pub(super) fn known(text: Cow<'_, str>, known: &[&'static str]) -> Cow<'static, str> {
    match known.iter().find(|k| **k == text) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(text.into_owned()),
    }
}

/// A parser's message without the " at line L column C" that serde_json ends it with.
pub(super) fn without_position(message: &str) -> &str {
    match message.rsplit_once(" at line ") {
        Some((before, at))
            if at.split_once(" column ").is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) =>
        {
            before
        }
        _ => message,
    }
}

/// A vhost's exchanges, made into `Live`'s map on the thread that received the listing.
pub(super) struct ListedExchanges(pub(super) BTreeMap<ExchangeName, LiveExchange>);

impl<'de> Deserialize<'de> for ListedExchanges {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedExchanges, D::Error> {
        let listed = Vec::<ExchangeInfo>::deserialize(d)?;
        let exchanges = listed.into_iter().map(|e| {
            let exchange = LiveExchange {
                kind: e.kind.as_str().into(),
                durable: e.durable,
                auto_delete: e.auto_delete,
                internal: e.internal,
                arguments: e.arguments.0,
            };
            (e.name.into(), exchange)
        });
        Ok(ListedExchanges(exchanges.collect()))
    }
}

/// A vhost's bindings, made into `Live`'s set on the thread that received the listing.
pub(super) struct ListedBindings(pub(super) BTreeSet<Binding>);

impl<'de> Deserialize<'de> for ListedBindings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedBindings, D::Error> {
        struct Bindings;
        impl<'de> serde::de::Visitor<'de> for Bindings {
            type Value = Vec<Binding>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of bindings")
            }
            // Each binding is made as it is parsed, its text borrowed from the answer until then:
            // the default exchange's implicit bindings, one per queue, are skipped without a copy.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Binding>, A::Error> {
                let mut bindings = Vec::new();
                while let Some(b) = seq.next_element::<BindingInfo<'de>>()? {
                    // The default exchange's implicit bindings are not bindings anyone can change.
                    if b.source.is_empty() {
                        continue;
                    }
                    // Names are shared text: made from the borrowed text, without a `String` first.
                    let destination = match &*b.destination_type {
                        "exchange" => Destination::Exchange((&*b.destination).into()),
                        _ => Destination::Queue((&*b.destination).into()),
                    };
                    bindings.push(Binding {
                        source: (&*b.source).into(),
                        destination,
                        routing_key: (&*b.routing_key).into(),
                        arguments: b.arguments.0,
                    });
                }
                Ok(bindings)
            }
        }
        Ok(ListedBindings(d.deserialize_seq(Bindings)?.into_iter().collect()))
    }
}

/// A node of the cluster, as `/api/nodes` lists it. A stopped node is listed with `running:
/// false` and no alarm fields.
#[derive(Debug, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    #[serde(default)]
    pub running: bool,
    #[serde(default)]
    pub mem_alarm: bool,
    #[serde(default)]
    pub disk_free_alarm: bool,
}

/// The fields of a binding's listing that `BindingInfo` reads, asked for as its `columns`.
pub(super) const BINDING_COLUMNS: &[&str] = &["source", "destination", "destination_type", "routing_key", "arguments"];

/// A binding as listed, its text borrowed from the answer where it holds no escapes.
#[derive(Debug, Deserialize)]
pub struct BindingInfo<'a> {
    #[serde(borrow)]
    pub source: Cow<'a, str>,
    #[serde(borrow)]
    pub destination: Cow<'a, str>,
    /// `queue` or `exchange`.
    #[serde(borrow)]
    pub destination_type: Cow<'a, str>,
    #[serde(borrow)]
    pub routing_key: Cow<'a, str>,
    #[serde(default)]
    pub arguments: ListedArguments,
}

#[derive(Debug, Deserialize)]
pub struct PolicyInfo {
    pub name: String,
    pub pattern: String,
    #[serde(rename = "apply-to")]
    pub apply_to: String,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub definition: Map<String, Value>,
}

/// A listing's `arguments` object, made into `Arguments` as it is parsed, with no map of JSON
/// values first. The names hopper reads (`arg::NAMED`) are shared, not copied: with each queue's
/// names copied, each comparison had a pointer to follow, and on RabbitMQ 4.3 at 500 topologies
/// indexing the queues by dead-letter target (`plan::index`) took 1.2 to 1.7 ms after the last
/// answer; with them shared, 0.6 ms.
#[derive(Debug, Default)]
pub struct ListedArguments(pub Arguments);

impl<'de> Deserialize<'de> for ListedArguments {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedArguments, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Arguments;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of arguments")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Arguments, A::Error> {
                let mut entries: Vec<(ArgKey, Option<ArgValue>)> = Vec::new();
                while let Some(Text(key)) = map.next_key()? {
                    let value = map.next_value::<Listed>()?.0;
                    let key: ArgKey = match arg::NAMED.iter().find(|named| **named == key) {
                        Some(named) => Cow::Borrowed(named),
                        None => Cow::Owned(key.into_owned()),
                    };
                    entries.push((key, value));
                }
                // A binding's or an exchange's are mostly `{}`.
                if entries.is_empty() {
                    return Ok(Arguments::new());
                }
                // The last of a name listed twice wins, as in a map, even when it is `null`: it
                // then leaves no value, not the one listed before it.
                entries.reverse();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                entries.dedup_by(|later, earlier| later.0 == earlier.0);
                Ok(Arguments::from_sorted(entries.into_iter().filter_map(|(key, value)| Some((key, value?))).collect()))
            }
        }
        Ok(ListedArguments(d.deserialize_map(Entries)?))
    }
}

/// A policy's value as the management API lists it; `null` is no value.
pub(super) fn arg(v: Value) -> Option<ArgValue> {
    Some(match v {
        Value::String(s) => ArgValue::str(s),
        Value::Bool(b) => ArgValue::Bool(b),
        Value::Number(n) => n.as_i64().map_or_else(|| ArgValue::Other(n.to_string()), ArgValue::Int),
        Value::Null => return None,
        other => ArgValue::Other(other.to_string()),
    })
}

/// An argument's value as the management API lists it, read as `arg` reads it, but straight
/// from the text where it is a string, a boolean or an integer, as almost every argument is,
/// with no JSON value made first; anything else is kept as the JSON it was listed as.
pub(super) struct Listed(pub(super) Option<ArgValue>);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Listed, D::Error> {
        struct Value;
        impl<'de> serde::de::Visitor<'de> for Value {
            type Value = Option<ArgValue>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an argument's value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::str(s)))
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Bool(b)))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Int(n)))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(Some(i64::try_from(n).map_or_else(|_| ArgValue::Other(n.to_string()), ArgValue::Int)))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Other(serde_json::Value::from(n).to_string())))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let listed = serde_json::Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Some(ArgValue::Other(listed.to_string())))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let listed = serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Some(ArgValue::Other(listed.to_string())))
            }
        }
        d.deserialize_any(Value).map(Listed)
    }
}
