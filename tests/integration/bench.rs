//! The benchmark (the workspace member `bench/`, run by `scripts/bench`) with a few topologies on
//! each broker, so that it cannot rot: every step runs and checks what it measures, the page it
//! writes from its data holds every row, and the benchmarks page is the program's. Nothing here
//! looks at a time.

use std::path::PathBuf;

use crate::support::{Broker, on_every_broker};
use hopper_bench as bench;

fn options() -> bench::Options {
    bench::Options {
        sizes: vec![3],
        repeats: 2,
        fresh: 1,
        queue_type: "classic".into(),
        hopper: PathBuf::from(env!("CARGO_BIN_EXE_hopper")),
        against: vec![],
        force: false,
        verbose: false,
        move_bytes: 512,
        settle: Some(std::time::Duration::from_secs(1)),
        read_for: None,
    }
}

/// The broker of the matrix that the tests' `broker` is, at the tests' addresses.
fn target(broker: Broker) -> bench::Broker {
    let (major, minor) = broker.version();
    let mut target = bench::Broker::matrix(&format!("{major}.{minor}")).unwrap();
    target.amqp = broker.amqp().to_string();
    target.management = broker.management().to_string();
    target
}

async fn small_run(broker: Broker) {
    let (major, minor) = broker.version();
    let target = target(broker);
    // Against itself, so that `--against`'s reads and rows run too.
    let options = bench::Options { against: vec![PathBuf::from(env!("CARGO_BIN_EXE_hopper"))], ..options() };
    let mut report = tokio::task::spawn_blocking(move || bench::run(&target, &options)).await.unwrap().unwrap();

    assert!(report.version.starts_with(&format!("{major}.{minor}.")), "{}", report.version);
    let [size] = &report.sizes[..] else { panic!("{:?}", report.sizes) };
    // 3 topologies: 5 queues, 3 exchanges, 7 bindings each.
    assert_eq!((size.topologies, size.objects), (3, (15, 9, 21)));
    let [against] = &size.against[..] else { panic!("{:?}", size.against) };
    for (what, step, runs) in [
        ("apply", &size.apply, 1),
        ("rabbitmqctl import", &size.ctl_import, 1),
        ("POST /api/definitions", &size.http_import, 1),
        ("listing", &size.listing, 2),
        ("listing on kept-alive connections", &size.listing_kept_alive, 2),
        ("no-op", &size.noop, 2),
        ("diff", &size.diff, 2),
        ("--against's no-op", &against.noop, 2),
        ("--against's diff", &against.diff, 2),
        ("dry run", &size.dry_run, 2),
        ("inspect", &size.inspect, 2),
        ("export", &size.export, 2),
        ("lint", &size.lint, 2),
    ] {
        assert_eq!(step.samples.len(), runs, "{what}");
    }
    // hopper's memory is measured, not guessed: some megabytes, from the kernel.
    for step in [&size.apply, &size.noop, &size.diff, &size.inspect, &size.export, &size.lint] {
        assert!(step.peak_mb().is_some_and(|mb| mb > 1.0), "{step:?}");
    }
    // The reads waited for a quiet machine (here at most about a second: other tests run
    // beside), and the table says how busy it was.
    let settled = size.settled.expect("the machine's load, read from /proc/stat");
    assert!(settled.waited >= std::time::Duration::from_secs(1), "{settled:?}");

    // The data goes through JSON and back whole, and a run `--against` is kept apart from the
    // curve: merged beside one without, both stay, and the curve's table is the plain run's.
    (report.commit, report.date) = ("abc1234".into(), "2026-01-01".into());
    let json =
        serde_json::to_string(&bench::page::Data { curves: vec![report.clone()], ..Default::default() }).unwrap();
    let mut data: bench::page::Data = serde_json::from_str(&json).unwrap();
    let mut plain = report.clone();
    plain.sizes[0].against.clear();
    data.merge(bench::page::Data { curves: vec![plain.clone(), plain], ..Default::default() });
    assert_eq!(data.curves.len(), 2, "one curve a broker, and the comparison beside it");
    let page = bench::page::markdown(&data);
    let table = bench::page::broker_table(&data.curves[0]);
    assert!(table.starts_with(&format!("**RabbitMQ {}**", report.version)), "{table}");
    assert!(table.contains("| step | 3 topologies (45 objects) |"), "{table}");
    assert!(!table.contains("—"), "a step without a figure:\n{table}");
    assert!(page.contains(&table), "{page}");
    assert!(page.contains("### Builds compared, round by round"), "{page}");
    assert!(page.contains("](benchmarks.svg)"), "{page}");
    let svg = bench::page::svg(&data);
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"), "{svg}");
    assert!(svg.contains(&format!("RabbitMQ {}", report.version)), "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 8, "a line a series, one broker");

    // The book's page is the program's: its generated part is what the program writes from the
    // data beside it, and writing it again changes nothing.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
    let text = std::fs::read_to_string(format!("{dir}/benchmarks.md")).unwrap();
    let data: bench::page::Data =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/benchmarks.json")).unwrap()).unwrap();
    let written = bench::page::replace_generated(&text, &bench::page::markdown(&data)).unwrap();
    assert!(
        written == text,
        "docs/benchmarks.md is not what its data renders: run scripts/bench --render docs/benchmarks.md"
    );
    let svg = std::fs::read_to_string(format!("{dir}/benchmarks.svg")).unwrap();
    assert!(
        svg == bench::page::svg(&data),
        "docs/benchmarks.svg is not its data's: run scripts/bench --render docs/benchmarks.md"
    );
}

/// `--move` with 100 messages, once: each mover moves them all (the program checks the counts),
/// the shovel wherever its plugin is (4.x), and the page's table has the broker's row.
async fn small_move(broker: Broker) {
    let (major, minor) = broker.version();
    let target = target(broker);
    let options = bench::Options { repeats: 1, ..options() };
    let result = tokio::task::spawn_blocking(move || bench::run_move(&target, &options, 100)).await.unwrap().unwrap();

    assert!(result.version.starts_with(&format!("{major}.{minor}.")), "{}", result.version);
    assert_eq!((result.redrive.samples.len(), result.migrate.samples.len()), (1, 1));
    // .ci/brokers.sh enables the shovel plugins on 4.0 and 4.3, never on the system 3.10.
    assert_eq!(result.shovel.samples.len(), usize::from(major >= 4), "{result:?}");
    assert_eq!(result.no_shovel.is_some(), major < 4, "{result:?}");
    assert!(result.redrive.peak_mb().is_some_and(|mb| mb > 1.0), "{result:?}");

    let page = bench::page::markdown(&bench::page::Data { moves: vec![result.clone()], ..Default::default() });
    let row = page.lines().find(|l| l.starts_with(&format!("| {}, classic | 100 × 512 B | **", result.version)));
    let row = row.unwrap_or_else(|| panic!("{page}"));
    assert_eq!(row.matches("msg/s").count(), if major >= 4 { 3 } else { 2 }, "{row}");
}

on_every_broker!(small_run, small_move);

/// A GET whose connection closes with no answer is sent once more on a new connection, and
/// counted; a second failure is the run's error.
#[test]
fn a_get_the_broker_drops_unanswered_is_sent_again_and_counted() {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Reads a request head, then answers it or closes the connection unanswered.
    let serve = move |answers: Vec<bool>| {
        for answer in answers {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
                head.push(byte[0]);
            }
            if answer {
                stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]").unwrap();
            }
        }
    };
    let mut broker = bench::Broker::matrix("4.3").unwrap();
    broker.management = format!("http://127.0.0.1:{port}/api");
    let http = bench::Http::new(&broker);
    let server = std::thread::spawn(move || serve(vec![false, true, false, false]));
    assert_eq!(http.get_json("/queues").unwrap(), serde_json::json!([]));
    assert_eq!(http.take_resent(), 1);
    let error = http.get_json("/queues").unwrap_err();
    assert!(format!("{error:#}").contains("GET http://127.0.0.1"), "{error:#}");
    assert_eq!(http.take_resent(), 1, "sent again once, not more");
    server.join().unwrap();
}

/// The quiet machine's arithmetic, on `/proc/stat` text and sequences of busy shares.
#[test]
fn quiet_reads_proc_stat_and_waits_for_two_quiet_seconds() {
    use bench::Quiet;
    let stat = "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 3 0\n";
    // busy = user + nice + system + irq + softirq + steal; idle and iowait are not.
    assert_eq!(Quiet::jiffies(stat), Some((160, 980)));
    assert_eq!(Quiet::jiffies("cpu  100 x 50 800 20 3 2 0\n"), None, "a field that is not a number");
    assert_eq!(Quiet::jiffies("cpu  100 5 50\n"), None, "too few fields");
    assert_eq!(Quiet::jiffies("intr 1 2 3 4 5 6 7 8\n"), None, "not the cpu line");

    assert_eq!(Quiet::share((100, 1000), (150, 1200)), Some(0.25));
    assert_eq!(Quiet::share((100, 1000), (100, 1000)), None, "no time passed");
    assert_eq!(Quiet::share((100, 1000), (90, 1200)), None, "busy went backwards");
    assert_eq!(Quiet::share((100, 1000), (150, 900)), None, "total went backwards");
    assert_eq!(Quiet::share((100, 1000), (400, 1200)), Some(1.0), "at most all of it");

    assert!(!Quiet::settled(&[]));
    assert!(!Quiet::settled(&[0.01]), "one quiet second is not two");
    assert!(!Quiet::settled(&[0.01, 0.5]));
    assert!(!Quiet::settled(&[0.01, 0.5, 0.02]));
    assert!(Quiet::settled(&[0.9, 0.5, 0.02, Quiet::BUSY]));
}

/// The paired figure: each round's read over the same round's listing, its median and a 95%
/// interval from the order statistics.
#[test]
fn paired_ratios_pair_rounds_and_bound_the_median() {
    use bench::{Paired, Sample, Step};
    let step =
        |secs: &[f64]| Step { samples: secs.iter().map(|&secs| Sample { secs, peak_mb: None, cpu: None }).collect() };

    // Round by round, not median over median: the listing slowed down in the later rounds and
    // hopper with it, so each round's ratio is 1.1 while the medians' ratio would be 0.96.
    let listing = step(&[1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 3.0]);
    let hopper = step(&[1.1, 1.1, 1.1, 1.1, 3.3, 3.3, 3.3, 3.3, 3.3]);
    let p = Paired::of(&hopper, &listing).unwrap();
    assert_eq!(p.rounds, 9);
    assert!((p.median - 1.1).abs() < 1e-9, "{p:?}");
    let (lo, hi) = p.interval.unwrap();
    assert!((lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9, "{p:?}");

    // Nine ratios 0.9, 1.0, ..., 1.7: the interval is the 2nd and 8th, 1.0 to 1.6.
    let listing = step(&[1.0; 9]);
    let p = Paired::of(&step(&[1.7, 0.9, 1.5, 1.0, 1.3, 1.1, 1.6, 1.2, 1.4]), &listing).unwrap();
    assert!((p.median - 1.3).abs() < 1e-9, "{p:?}");
    let (lo, hi) = p.interval.unwrap();
    assert!((lo - 1.0).abs() < 1e-9 && (hi - 1.6).abs() < 1e-9, "{p:?}");

    // Too few rounds for an interval; unequal rounds: no pairs.
    let few = Paired::of(&step(&[1.0; 5]), &step(&[1.0; 5])).unwrap();
    assert_eq!(few.interval, None);
    assert_eq!(Paired::of(&step(&[1.0; 5]), &step(&[1.0; 4])), None);
}

/// The interval's positions, checked against the exact binomial sums for every number of
/// rounds the benchmark can run: at least 95% coverage, and one position further in would be
/// under it (the narrowest such interval).
#[test]
fn median_interval_is_the_narrowest_with_95_percent_coverage() {
    // P(Binomial(n, 1/2) <= k) * 2^n, exactly.
    fn below(n: usize, k: usize) -> u128 {
        let mut c = 1u128;
        let mut sum = 0;
        for i in 0..=k {
            sum += c;
            c = c * (n - i) as u128 / (i + 1) as u128;
        }
        sum
    }
    for n in 1..=bench::MAX_ROUNDS {
        let total = 1u128 << n;
        // Coverage of (k, n-1-k) is 1 - 2 P(B <= k); at least 95% is P(B <= k) <= 2.5%.
        let covers = |k: usize| below(n, k) * 40 <= total;
        match bench::median_interval(n) {
            None => assert!(!covers(0), "{n} rounds have an interval"),
            Some((k, hi)) => {
                assert_eq!(hi, n - 1 - k, "{n}: symmetric");
                assert!(covers(k), "{n}: ({k}, {hi}) covers less than 95%");
                assert!(k + 1 >= n / 2 || !covers(k + 1), "{n}: ({}, {}) also covers 95%", k + 1, hi - 1);
            }
        }
    }
    assert_eq!(bench::median_interval(5), None);
    assert_eq!(bench::median_interval(6), Some((0, 5)));
    assert_eq!(bench::median_interval(9), Some((1, 7)));
}
