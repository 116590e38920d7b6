//! The benchmark (`examples/bench.rs`, run by `scripts/bench`) with a few topologies on each
//! broker, so that it cannot rot: every step runs and checks what it measures, the table has
//! every row, and the benchmarks page's tables are the program's. Nothing here looks at a time.

use std::path::PathBuf;

use crate::bench_program as bench;
use crate::support::{Broker, on_every_broker};

fn options() -> bench::Options {
    bench::Options {
        sizes: vec![3],
        repeats: 2,
        fresh: 1,
        queue_type: "classic".into(),
        hopper: PathBuf::from(env!("CARGO_BIN_EXE_hopper")),
        against: None,
        force: false,
        verbose: false,
        move_bytes: 512,
        settle: Some(std::time::Duration::from_secs(1)),
        read_for: None,
        pin: false,
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
    let options = bench::Options { against: Some(PathBuf::from(env!("CARGO_BIN_EXE_hopper"))), ..options() };
    let report = tokio::task::spawn_blocking(move || bench::run(&target, &options)).await.unwrap().unwrap();

    assert!(report.version.starts_with(&format!("{major}.{minor}.")), "{}", report.version);
    let [size] = &report.sizes[..] else { panic!("{:?}", report.sizes) };
    // 3 topologies: 5 queues, 3 exchanges, 7 bindings each.
    assert_eq!((size.topologies, size.objects), (3, (15, 9, 21)));
    for (what, step, runs) in [
        ("apply", &size.apply, 1),
        ("rabbitmqctl import", &size.ctl_import, 1),
        ("POST /api/definitions", &size.http_import, 1),
        ("listing", &size.listing, 2),
        ("listing on kept-alive connections", &size.listing_kept_alive, 2),
        ("no-op", &size.noop, 2),
        ("diff", &size.diff, 2),
        ("--against's no-op", &size.against_noop, 2),
        ("--against's diff", &size.against_diff, 2),
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

    let table = bench::markdown(&report, "abc1234", "2026-01-01");
    assert!(table.starts_with(&format!("**RabbitMQ {}**", report.version)), "{table}");
    assert!(table.contains("| step | 3 topologies (45 objects) |"), "{table}");
    assert!(!table.contains("—"), "a step without a figure:\n{table}");
    assert!(table.contains("| this build ÷ the `--against` build: no-op apply, `diff` |"), "{table}");
    let without = bench::Report {
        sizes: vec![bench::SizeResult {
            against_noop: Default::default(),
            against_diff: Default::default(),
            ..size.clone()
        }],
        ..report.clone()
    };
    assert!(
        !bench::markdown(&without, "abc1234", "2026-01-01").contains("--against"),
        "rows of a build not run against"
    );
    // The reads waited for a quiet machine (here at most about a second: other tests run
    // beside), and the table says how busy it was; a wait that ran out says so in a note.
    let settled = size.settled.expect("the machine's load, read from /proc/stat");
    assert!(settled.waited >= std::time::Duration::from_secs(1), "{settled:?}");
    assert!(table.contains("Before each size's reads the run waited for the machine"), "{table}");
    assert_eq!(table.contains("had not been quiet for two seconds"), !settled.quiet, "{table}");

    // The book's benchmarks page holds this broker's table between its markers, in the program's own words:
    // every row label the program writes is there, and re-running replaces only that block.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md")).unwrap();
    let name = format!("{major}.{minor}");
    let replaced = bench::replace_between_markers(&readme, &name, &table).unwrap();
    assert!(replaced.contains(&table));
    assert_eq!(bench::replace_between_markers(&replaced, &name, &table).unwrap(), replaced, "not idempotent");
    let begin = readme.find(&format!("<!-- bench:{name}:begin -->")).unwrap();
    let block = &readme[begin..begin + readme[begin..].find(&format!("<!-- bench:{name}:end -->")).unwrap()];
    // (`--against`'s rows are only in a run that used it, which the page's need not be.)
    for line in table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| step") && !l.contains("--against")) {
        let label = line.split(" | ").next().unwrap();
        assert!(
            block.contains(&format!("{label} |")),
            "the benchmarks page's {name} table lacks the row {label:?}: re-run scripts/bench --write docs/benchmarks.md"
        );
    }

    // The target rows: one for the size, its rounds paired (2 rounds: too few for an
    // interval, so undecided), replacing only this broker and size's row on the benchmarks page.
    let rows = bench::target_rows(&report, "abc1234");
    let [row] = &rows[..] else { panic!("{rows:?}") };
    assert!(row.starts_with(&format!("| {} | 3 | 2 | ", report.version)), "{row}");
    assert!(row.ends_with(" | undecided | abc1234 |"), "{row}");
    let replaced = bench::replace_target_rows(&readme, &rows).unwrap();
    assert!(replaced.contains(&format!("\n{row}\n")), "{replaced}");
    assert_eq!(bench::replace_target_rows(&replaced, &rows).unwrap(), replaced, "not idempotent");
    let target = |text: &str| {
        let start = text.find("<!-- bench:target:begin -->").expect("the benchmarks page's target table");
        text[start..start + text[start..].find("<!-- bench:target:end -->").unwrap()].lines().count()
    };
    assert_eq!(target(&replaced), target(&readme) + 1, "a row added for a size the page does not have");
}

/// `--move` with 100 messages, once: each mover moves them all (the program checks the counts),
/// the shovel wherever its plugin is (4.x), and the benchmarks page's move table takes the row in place.
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

    let row = bench::move_row(&result);
    assert!(row.starts_with(&format!("| {}, classic | **", result.version)), "{row}");
    assert_eq!(row.contains("×"), major >= 4, "{row}");

    // The benchmarks page's table keeps its header and its other rows; this broker's is replaced, once.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md")).unwrap();
    let replaced = bench::replace_move_rows(&readme, std::slice::from_ref(&row)).unwrap();
    assert!(replaced.contains(&format!("\n{row}\n")), "{replaced}");
    assert_eq!(bench::replace_move_rows(&replaced, &[row]).unwrap(), replaced, "not idempotent");
    let rows = |text: &str| text.lines().filter(|l| l.starts_with("| ") && l.contains(" msg/s")).count();
    assert_eq!(rows(&replaced), rows(&readme));
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
/// interval from the order statistics, and where that interval stands against a bound.
#[test]
fn paired_ratios_pair_rounds_and_bound_the_median() {
    use bench::{Paired, Sample, Step, Verdict};
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
    assert_eq!(p.verdict(1.2), Verdict::Within);

    // Nine ratios 0.9, 1.0, ..., 1.7: the interval is the 2nd and 8th, 1.0 to 1.6.
    let listing = step(&[1.0; 9]);
    let p = Paired::of(&step(&[1.7, 0.9, 1.5, 1.0, 1.3, 1.1, 1.6, 1.2, 1.4]), &listing).unwrap();
    assert!((p.median - 1.3).abs() < 1e-9, "{p:?}");
    let (lo, hi) = p.interval.unwrap();
    assert!((lo - 1.0).abs() < 1e-9 && (hi - 1.6).abs() < 1e-9, "{p:?}");
    assert_eq!(p.verdict(1.2), Verdict::Undecided, "straddles the bound");
    assert_eq!(p.verdict(1.6), Verdict::Within, "at the bound is within");
    assert_eq!(p.verdict(0.95), Verdict::Over);

    // Too few rounds for an interval: undecided whatever the median; unequal rounds: no pairs.
    let few = Paired::of(&step(&[1.0; 5]), &step(&[1.0; 5])).unwrap();
    assert_eq!((few.interval, few.verdict(1.2)), (None, Verdict::Undecided));
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

/// `--pin` on a process of the test's own (a `sleep`, not a broker that other tests share):
/// every thread of it moves off the last CPU, this process onto it, and both get back what they
/// had when the pin is dropped. On a machine of one CPU it is refused instead.
#[test]
fn pinning_moves_a_process_off_the_readers_cpu_and_gives_it_back() {
    let allowed = |pid: u32| -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    // Killed however the test ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let sleep = Child(std::process::Command::new("sleep").arg("60").spawn().unwrap());
    let (child, own) = (sleep.0.id(), std::process::id());
    let (child_before, own_before) = (allowed(child), allowed(own));
    let cpus = std::thread::available_parallelism().unwrap().get();
    match bench::Pinned::of(&[child as i32]) {
        Ok(pinned) => {
            let last = own_before.rsplit([',', '-']).next().unwrap().to_string();
            assert_eq!(allowed(own), last, "this process on the last CPU");
            assert!(!allowed(child).split([',', '-']).any(|c| c == last), "{}", allowed(child));
            assert!(pinned.describe().contains(&format!("on CPU {last}")), "{}", pinned.describe());
            // The undo line gives the child every CPU it had (the kernel's list: "0-1", "0,2-3").
            let had: Vec<String> = child_before
                .split(',')
                .flat_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()
                })
                .map(|c| c.to_string())
                .collect();
            assert_eq!(pinned.undo(), format!("taskset -a -p -c {} {child}", had.join(",")));
            drop(pinned);
            assert_eq!((allowed(child), allowed(own)), (child_before, own_before), "given back");
        }
        Err(e) => {
            assert_eq!(cpus, 1, "{e:#}");
            assert!(format!("{e:#}").contains("two CPUs"), "{e:#}");
        }
    }
    drop(sleep);
}

/// The system broker is never pinned: other tests share it. A chroot broker's processes are
/// found by their root (read only: nothing is pinned here).
#[test]
fn pin_refuses_the_system_broker_and_finds_a_chroot_brokers_processes() {
    let system = bench::Broker::matrix("3.10").unwrap();
    let refused = bench::Pinned::new(&system).err().expect("the system broker refused");
    assert!(format!("{refused:#}").contains("system broker"), "{refused:#}");

    let broker = bench::Broker::matrix("4.3").unwrap();
    let (root, _) = broker.chroot.as_ref().unwrap();
    let pids = bench::Pinned::processes_in(root).unwrap();
    let names: Vec<String> =
        pids.iter().filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok()).collect();
    assert!(names.iter().any(|n| n.trim() == "beam.smp"), "the broker's VM among {names:?} in {}", root.display());
}
