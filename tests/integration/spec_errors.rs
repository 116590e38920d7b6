const CASES: &[(&str, &str)] = &[
    ("quorum gen", &"Y"),
    ("quorum gen 243", &"W"),
    ("dlx=exchange", "[topology.orders]\ndelays = [\"5s\"]\ndead_letter_exchange = \"orders\"\n"),
    ("dlq=wait", "[topology.orders]\ndelays = [\"5s\"]\ndead_letter_queue = \"orders.wait-5s\"\n"),
    ("dlq=queue", "[topology.orders]\ndelays = [\"5s\"]\ndead_letter_queue = \"orders\"\n"),
    ("ma1 delays", "[topology.orders]\nmax_attempts = 1\ndelays = [\"5s\", \"1m\"]\n"),
    ("unicode col", "[topology.orders]\ndelays = [\"5s\"]\nrouting_keys = [\"café\", 1]\n"),
    ("crlf", "[topology.orders]\r\ndelays = [\"5s\"]\r\nmax_attempts = 0\r\n"),
    ("delay int ma3", "[topology.orders]\nmax_attempts = 3\ndelays = [\"5s\", 30]\n"),
    (
        "three",
        "vhosts = \"/\"\n[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"stream\"\n\n[topology.payments]\ndelays = [\"5s\"]\nmax_attempts = 0\n",
    ),
    ("eof", "[topology.orders]\ndelays = [\"5s\"\n"),
    ("empty file", ""),
    ("neg max", "[topology.orders]\nmax_attempts = -3\n"),
    ("float max", "[topology.orders]\nmax_attempts = 3.0\ndelays = [\"5s\"]\n"),
    ("vhost override", "vhost = \"\"\n[topology.orders]\ndelays = [\"5s\"]\n"),
    ("dlimit neg", "[topology.orders]\ndelays = [\"5s\"]\ndelivery_limit = -1\n"),
    ("mult neg inf", "[topology.orders]\nmax_attempts = 3\nbackoff = { initial = \"1s\", multiplier = inf }\n"),
    (
        "backoff section",
        "[topology.orders]\nmax_attempts = 3\n[topology.orders.backoff]\ninitial = \"1s\"\nmultiplyer = 2\n",
    ),
    ("big backoff", "[topology.orders]\nmax_attempts = 100\nbackoff = { initial = \"1d\", multiplier = 10.0 }\n"),
];

fn text(name: &str, t: &str) -> String {
    match t {
        "X" => format!("[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\n", "q".repeat(256)),
        "Y" => format!("[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\n", "q".repeat(240)),
        "W" => format!("[topology.orders]\ndelays = [\"5s\"]\nqueue = \"{}\"\n", "q".repeat(245)),
        "Z" => format!("[topology.orders]\ndelays = [\"5s\"]\nrouting_keys = [\"{}\"]\n", "k".repeat(256)),
        _ => {
            let _ = name;
            t.to_string()
        }
    }
}

#[test]
fn probe() {
    for (name, t) in CASES {
        let t = text(name, t);
        println!("=================== {name}");
        match hopper::spec::from_str("bad.toml", &t) {
            Ok(_) => println!("OK!!!"),
            Err(e) => {
                for d in &e.diagnostics {
                    println!(
                        "POS {} | {:?} | label {:?} | hint {:?} | related {:?}",
                        e.position(d),
                        d.message,
                        d.label,
                        d.hint,
                        d.related
                    );
                }
                println!("{}", e.render_plain());
            }
        }
    }
}
