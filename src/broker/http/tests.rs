use super::listing::*;
use super::*;
use crate::model::{ArgValue, Destination};

#[test]
fn vhosts_are_one_segment() {
    assert_eq!(segment("/"), "%2F");
    assert_eq!(segment("a b/c"), "a%20b%2Fc");
    assert_eq!(segment("orders.dlq-1_~é%"), "orders.dlq-1_~%C3%A9%25");
    // The same escaping as the AMQP URL's vhost, which reads back as itself.
    let url = format!("amqp://h/{}", segment("a/b é%"));
    assert_eq!(super::super::uri::parse(&url).unwrap().vhost.as_deref(), Some("a/b é%"));
}

fn listed(json: &str) -> Result<Vec<QueueInfo>, serde_json::Error> {
    Ok(serde_json::from_str::<Vec<ListedQueue>>(json)?.into_iter().map(|ListedQueue(q)| q).collect())
}

#[test]
fn a_queue_listed_with_a_field_twice_is_read() {
    // As RabbitMQ 3.10 lists a quorum queue with a member offline: `online` twice.
    let qs = listed(
        r#"[{"name":"orders","type":"quorum","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"},
             "members":["a","b","c"],"online":["a","b","c"],"online":["a","c"],"garbage_collection":{"x":1}},
            {"name":"old","durable":true,"auto_delete":false,"node":"n1","node":"n2"}]"#,
    )
    .unwrap();
    assert_eq!(
        qs[0].online.as_deref(),
        Some(&["a".to_string(), "c".to_string()][..]),
        "online only if every listing says so"
    );
    assert_eq!(qs[0].arguments.get("x-queue-type"), Some(&ArgValue::str("quorum")));
    assert_eq!(
        (qs[1].kind.as_str(), qs[1].node.as_deref(), qs[1].online.as_ref()),
        ("classic", Some("n2"), None),
        "the last value, classic by default"
    );
}

#[test]
fn online_that_is_not_a_list_of_nodes_is_not_read_as_none_online() {
    let queue = |online: &str| {
        listed(&format!(
            r#"[{{"name":"orders","type":"quorum","durable":true,"auto_delete":false,"members":["a","b"],{online}}}]"#
        ))
    };
    assert_eq!(queue(r#""online":null"#).unwrap()[0].online, None, "not known");
    assert_eq!(queue(r#""online":"""#).unwrap()[0].online, None, "RabbitMQ's '' for not known");
    assert_eq!(
        queue(r#""online":["a"],"online":null"#).unwrap()[0].online.as_deref(),
        Some(&["a".to_string()][..]),
        "a listing that does not know leaves what another said"
    );
    // Named however it is written, even before its name; a hostile name is escaped.
    let e =
        listed(r#"[{"online":7,"name":"a\"b\u001b[2J","durable":true,"auto_delete":false}]"#).unwrap_err().to_string();
    assert!(e.contains(r#"queue "a\"b\u{1b}[2J": `online` is 7"#), "{e}");
    for odd in [r#""online":"a""#, r#""online":{"a":true}"#, r#""online":[1]"#] {
        let e = queue(odd).unwrap_err().to_string();
        assert!(e.contains("the management API listed a queue hopper cannot read"), "{odd}: {e}");
        assert!(e.contains("queue \"orders\": `online` is "), "the queue named: {odd}: {e}");
        assert!(e.contains("not a list of node names"), "{odd}: {e}");
    }
}

#[test]
fn every_column_asked_for_is_a_field_read() {
    for column in QUEUE_FIELDS.iter().chain(UNCOUNTED_QUEUE_FIELDS) {
        let field: QueueField = serde_json::from_value(Value::from(*column)).unwrap();
        assert!(!matches!(field, QueueField::Other), "{column} is asked for and then skipped");
    }
    let counts = ["messages", "messages_unacknowledged", "consumers"];
    let mut uncounted: Vec<&str> = UNCOUNTED_QUEUE_FIELDS.iter().chain(&counts).copied().collect();
    let mut counted = QUEUE_FIELDS.to_vec();
    uncounted.sort();
    counted.sort();
    assert_eq!(uncounted, counted, "without statistics, every column but the counts");
}

/// A column left out of the list would fail the read or, where a field has a default, be
/// read as that default (an exchange not internal, a binding without arguments).
#[test]
fn exchanges_and_bindings_are_read_from_the_columns_asked_for() {
    let only = |columns: &[&str], sample: Value| -> Value {
        Value::Object(columns.iter().map(|c| (c.to_string(), sample[*c].clone())).collect())
    };
    let exchange = serde_json::json!({"name": "e", "type": "topic", "durable": true, "auto_delete": true,
        "internal": true, "arguments": {"alternate-exchange": "ae"}, "vhost": "/", "user_who_performed_action": "x"});
    // Whole: a field added to the struct must be added here, and then to the columns.
    let ExchangeInfo { name, kind, durable, auto_delete, internal, arguments } =
        serde_json::from_value(only(EXCHANGE_COLUMNS, exchange)).unwrap();
    assert_eq!((name.as_str(), kind.as_str(), durable, auto_delete, internal), ("e", "topic", true, true, true));
    assert_eq!(arguments.0.len(), 1);
    let binding = serde_json::json!({"source": "s", "destination": "d", "destination_type": "exchange",
        "routing_key": "k", "arguments": {"x-match": "any"}, "vhost": "/", "properties_key": "k"});
    let text = only(BINDING_COLUMNS, binding).to_string();
    let BindingInfo { source, destination, destination_type, routing_key, arguments } =
        serde_json::from_str(&text).unwrap();
    assert_eq!((&*source, &*destination, &*destination_type, &*routing_key), ("s", "d", "exchange", "k"));
    assert_eq!(arguments.0.len(), 1);
}

/// As a map of JSON values made them: `null` is no value, the last of a name listed twice
/// wins (a `null` last too), a number that is not an integer and an object are kept as their text, and a name
/// with escapes is read whole.
#[test]
fn listed_arguments_read_as_a_map_would() {
    let ListedArguments(arguments) = serde_json::from_str(
        r#"{"x-message-ttl": 5000, "x-dead-letter-exchange": "dlx", "x-a\"b": true, "x-none": null,
            "x-fraction": 1.5, "x-object": {"a": [1]}, "x-message-ttl": 6000, "x-queue-type": "quorum",
            "x-expires": 1000, "x-expires": null}"#,
    )
    .unwrap();
    let read: Vec<(&str, &ArgValue)> = arguments.iter().collect();
    assert_eq!(
        read,
        [
            ("x-a\"b", &ArgValue::Bool(true)),
            ("x-dead-letter-exchange", &ArgValue::str("dlx")),
            ("x-fraction", &ArgValue::Other("1.5".into())),
            ("x-message-ttl", &ArgValue::Int(6000)),
            ("x-object", &ArgValue::Other(r#"{"a":[1]}"#.into())),
            ("x-queue-type", &ArgValue::str("quorum")),
        ]
    );
    assert!(serde_json::from_str::<ListedArguments>(r#"["x-message-ttl"]"#).is_err(), "a list is not arguments");
}

/// Read straight from the text, a value is what the JSON value a policy's is read through
/// makes of it, at the edges of the integers and in every other kind of JSON.
#[test]
fn an_argument_is_read_as_its_json_value_would_be() {
    for json in [
        "0",
        "-1",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "18446744073709551615",
        "1.5",
        "1e3",
        "-0.0",
        "2.5E-7",
        "true",
        "false",
        "null",
        r#""""#,
        r#""a\"b\u00e9\n""#,
        "[]",
        r#"[1,"a",null]"#,
        "{}",
        r#"{"b":{"c":[true]},"a":1}"#,
    ] {
        let Listed(read) = serde_json::from_str(json).unwrap();
        assert_eq!(read, arg(serde_json::from_str(json).unwrap()), "{json}");
    }
}

#[test]
fn bindings_are_read_escapes_and_all_without_the_default_exchange() {
    let ListedBindings(bindings) = serde_json::from_str(
        r##"[{"source":"","vhost":"/","destination":"q","destination_type":"queue","routing_key":"q","arguments":{}},
            {"source":"a\"b","vhost":"/","destination":"q\u00e9","destination_type":"queue","routing_key":"k\\","arguments":{"x-match":"all"}},
            {"source":"a","vhost":"/","destination":"e","destination_type":"exchange","routing_key":"#","arguments":{}}]"##,
    )
    .unwrap();
    let listed: Vec<String> = bindings.iter().map(ToString::to_string).collect();
    assert_eq!(bindings.len(), 2, "{listed:?}");
    let escaped = bindings.iter().find(|b| b.source.as_str() == "a\"b").expect("the escaped source");
    assert_eq!(escaped.destination, Destination::Queue("qé".into()));
    assert_eq!((escaped.routing_key.as_str(), escaped.arguments.len()), ("k\\", 1));
    assert!(bindings.iter().any(|b| b.destination == Destination::Exchange("e".into())));
}

#[test]
fn a_queue_without_a_name_is_an_error() {
    let e = listed(r#"[{"durable":true,"auto_delete":false}]"#).unwrap_err();
    assert!(e.to_string().contains("missing field `name`"), "{e}");
}

#[test]
fn a_queue_hopper_cannot_read_is_an_error_that_says_so() {
    let e = listed(r#"[{"name":"orders","durable":"yes","auto_delete":false}]"#).unwrap_err();
    assert!(e.to_string().contains("the management API listed a queue hopper cannot read"), "{e}");
    assert_eq!(e.to_string().matches(" at line ").count(), 1, "the position once: {e}");
}

/// A server on loopback that closes its first `cut` connections after reading a request, then
/// answers `[]`; returns its API base and how many connections it took.
fn cutting_server(cut: usize) -> (String, std::sync::Arc<AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/api", listener.local_addr().unwrap());
    let taken = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = taken.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            if seen.fetch_add(1, Ordering::SeqCst) < cut {
                // Half an answer, then the connection goes: ureq's "Peer disconnected".
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n[");
                continue;
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]");
        }
    });
    (base, taken)
}

#[tokio::test]
async fn a_get_cut_off_mid_answer_is_sent_again_and_a_put_is_not() {
    let (base, taken) = cutting_server(2);
    let api = Api::new(&Endpoint::new("amqp://127.0.0.1:1", Some(&base)).unwrap());
    let listed: Vec<Value> = api.get("/queues").await.unwrap();
    assert!(listed.is_empty());
    assert_eq!(taken.load(Ordering::SeqCst), 3, "two cut off, the third answered");

    let (base, taken) = cutting_server(3);
    let api = Api::new(&Endpoint::new("amqp://127.0.0.1:1", Some(&base)).unwrap());
    let e = api.get::<Vec<Value>>("/queues").await.unwrap_err();
    assert!(e.cut_off(), "{e:?}");
    assert_eq!(taken.load(Ordering::SeqCst), 3, "sent three times, no more");

    let (base, taken) = cutting_server(1);
    let api = Api::new(&Endpoint::new("amqp://127.0.0.1:1", Some(&base)).unwrap());
    assert!(api.put("/vhosts/a", &Value::Null).await.is_err());
    assert_eq!(taken.load(Ordering::SeqCst), 1, "a PUT may have been carried out: not sent again");
}
