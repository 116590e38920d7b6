//! The benchmark's command line (`scripts/bench --help`): runs, then writes what it measured
//! into the data beside the page (docs/benchmarks.json) and the page from all of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use hopper_bench::{Broker, MEASURER, Options, page};

const USAGE: &str = "\
usage: scripts/bench [--broker 3.10|4.0|4.3]... [--sizes 500,2000,10000] [--repeats 3]
                     [--fresh-repeats 1] [--queue-type classic|quorum] [--force]
                     [--settle 300] [--read-for 240] [--bin PATH] [--against PATH]...
                     [--write docs/benchmarks.md]
       scripts/bench --move N [--move-bytes 1024] [--broker ...]... [--repeats 3]
                     [--queue-type classic|quorum] [--bin PATH] [--write docs/benchmarks.md]
       scripts/bench --offline N [--write docs/benchmarks.md]
       scripts/bench --render docs/benchmarks.md [--merge RESULTS.json]...

Every broker of the matrix (or those given), at each size: hopper against the broker's import
and the cheapest complete listing. Progress goes to stderr, the results as JSON to stdout.
--write PAGE: the results also replace their broker's (and queue type's) in the data beside the
page (PAGE with .json for .md), and the page's generated part is written again from all of the
data; --render PAGE writes it again without running anything, after merging in the results a
run printed (--merge FILE: its stdout, saved).
Interrupted (Ctrl-C), it leaves its vhosts (hb<pid>-...) on the broker.
--repeats N: runs of each offline step, and the least rounds of reads (one of each read a round).
--read-for S: after those, more rounds of reads (at most 99) while a size's reads have taken less
than S seconds; 0 runs only --repeats rounds.
--settle S: before each size's reads, wait up to S seconds for the machine to be quiet (at most
10% busy for two seconds), and before each read up to 5 s for half a second of it; 0 does not wait.
--bin: the hopper binary (default: the one beside this program, target/release/hopper).
--against PATH: another hopper build (a copy of an earlier one's binary, say), whose no-op apply
and diff run in the same rounds, paired by round; repeated, several. Such a run is kept in the
data apart from the curve, as a comparison of builds.
--move N: messages moved a second instead: N persistent messages of --move-bytes bytes in a
topology's dead-letter queue, moved to its main queue by `hopper redrive`, back by the
management UI's \"Move messages\" shovel (brokers with rabbitmq_shovel_management: 4.0 and 4.3),
then out and back by the mover of `apply --migrate`, with hopper's peak memory.
--offline N: no broker; one spec file of N topologies, each offline command's time and memory.";

fn main() -> std::process::ExitCode {
    match cli() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn cli() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--measure-child") {
        return hopper_bench::measure_child(&argv[1..]);
    }
    let mut brokers = vec![];
    let mut options = Options {
        sizes: vec![500, 2000, 10000],
        repeats: 3,
        fresh: 1,
        queue_type: "classic".into(),
        hopper: PathBuf::new(),
        against: vec![],
        force: false,
        verbose: true,
        move_bytes: 1024,
        settle: Some(Duration::from_secs(300)),
        read_for: Some(Duration::from_secs(240)),
    };
    let (mut write, mut render, mut offline, mut moves) = (None, None, None, None);
    let mut merge = vec![];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow!("{arg} takes a value\n{USAGE}"));
        match arg.as_str() {
            "--broker" => brokers.push(Broker::matrix(&value()?)?),
            "--sizes" => {
                options.sizes =
                    value()?.split(',').map(|s| s.trim().replace('_', "").parse()).collect::<Result<_, _>>()?;
            }
            "--repeats" => options.repeats = value()?.parse()?,
            "--fresh-repeats" => options.fresh = value()?.parse()?,
            "--queue-type" => options.queue_type = value()?,
            "--force" => options.force = true,
            "--write" => write = Some(PathBuf::from(value()?)),
            "--render" => render = Some(PathBuf::from(value()?)),
            "--merge" => merge.push(PathBuf::from(value()?)),
            "--bin" => options.hopper = PathBuf::from(value()?),
            "--against" => options.against.push(PathBuf::from(value()?)),
            "--offline" => offline = Some(value()?.replace('_', "").parse::<usize>()?),
            "--move" => moves = Some(value()?.replace('_', "").parse::<usize>()?),
            "--move-bytes" => options.move_bytes = value()?.replace('_', "").parse()?,
            "--settle" => {
                let secs: u64 = value()?.parse()?;
                options.settle = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "--read-for" => {
                let secs: u64 = value()?.parse()?;
                options.read_for = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if let Some(page) = render {
        let mut data = page::Data::default();
        for file in merge {
            let text = fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
            data.merge(serde_json::from_str(&text).with_context(|| format!("{}", file.display()))?);
        }
        return write_page(&page, data);
    }
    if options.repeats == 0 || options.fresh == 0 || options.sizes.contains(&0) || moves == Some(0) {
        bail!("sizes, repeats and messages to move must be positive");
    }
    if !["classic", "quorum"].contains(&options.queue_type.as_str()) {
        bail!("--queue-type takes classic or quorum");
    }
    if brokers.is_empty() {
        brokers = ["3.10", "4.0", "4.3"].iter().map(|b| Broker::matrix(b)).collect::<Result<_>>()?;
    }
    if options.hopper.as_os_str().is_empty() {
        let exe = std::env::current_exe()?;
        options.hopper = exe.with_file_name("hopper");
    }
    // Copies of hopper and of this program (which measures each command as its parent): a
    // rebuild during the run must not swap either binary in the middle of it.
    let copy = std::env::temp_dir().join(format!("hopper-bench-{}-hopper", std::process::id()));
    fs::copy(&options.hopper, &copy).with_context(|| format!("the hopper binary {}", options.hopper.display()))?;
    options.hopper = copy.clone();
    let measurer = std::env::temp_dir().join(format!("hopper-bench-{}-measurer", std::process::id()));
    fs::copy(std::env::current_exe()?, &measurer)?;
    let _ = MEASURER.set(measurer.clone());
    let outcome = measure(&brokers, &options, offline, moves);
    let _ = fs::remove_file(copy);
    let _ = fs::remove_file(measurer);
    let (data, failed) = outcome?;
    println!("{}", serde_json::to_string_pretty(&data)?);
    if let Some(page) = &write {
        write_page(page, data)?;
    }
    failed.map_or(Ok(()), Err)
}

/// Runs what was asked; what was measured, and the last failure (the other brokers still run).
fn measure(
    brokers: &[Broker],
    options: &Options,
    offline: Option<usize>,
    moves: Option<usize>,
) -> Result<(page::Data, Option<anyhow::Error>)> {
    let (commit, date) = (commit(), today()?);
    let mut data = page::Data::default();
    if let Some(n) = offline {
        let mut result = hopper_bench::offline(&options.hopper, n)?;
        (result.commit, result.date) = (commit, date);
        data.offline = Some(result);
        return Ok((data, None));
    }
    let mut failed = None;
    for broker in brokers {
        let outcome = match moves {
            Some(n) => hopper_bench::run_move(broker, options, n).map(|mut m| {
                (m.commit, m.date) = (commit.clone(), date.clone());
                data.moves.push(m);
            }),
            None => hopper_bench::run(broker, options).map(|mut report| {
                if let Some(why) = &report.failure {
                    eprintln!("bench {}: {why}", broker.name);
                    failed = Some(anyhow!("RabbitMQ {}: {why}", broker.name));
                }
                (report.commit, report.date) = (commit.clone(), date.clone());
                data.curves.push(report);
            }),
        };
        if let Err(e) = outcome {
            eprintln!("bench {}: {e:#}", broker.name);
            failed = Some(e);
        }
    }
    Ok((data, failed))
}

/// The page's data with `new` merged in, written back, and the page from it.
fn write_page(page: &Path, new: page::Data) -> Result<()> {
    let data_path = page.with_extension("json");
    let mut data: page::Data = match fs::read_to_string(&data_path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("{}", data_path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => page::Data::default(),
        Err(e) => return Err(e).with_context(|| format!("{}", data_path.display())),
    };
    data.merge(new);
    fs::write(&data_path, serde_json::to_string_pretty(&data)? + "\n")?;
    let text = fs::read_to_string(page).with_context(|| format!("{}", page.display()))?;
    let svg = page.with_file_name("benchmarks.svg");
    fs::write(&svg, page::svg(&data))?;
    fs::write(page, page::replace_generated(&text, &page::markdown(&data))?)?;
    eprintln!("bench: wrote {}, {} and {}", data_path.display(), svg.display(), page.display());
    Ok(())
}

/// hopper's commit, and whether its code differs from it.
fn commit() -> String {
    let git = |args: &[&str]| Command::new("git").args(args).output().ok();
    let commit = git(&["rev-parse", "--short", "HEAD"])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into());
    let dirty = Command::new("git")
        .args(["diff", "--quiet", "HEAD", "--", "src", "Cargo.toml", "Cargo.lock"])
        .status()
        .is_ok_and(|s| !s.success());
    if dirty { format!("{commit} with uncommitted changes") } else { commit }
}

fn today() -> Result<String> {
    let out = Command::new("date").args(["-u", "+%Y-%m-%d"]).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
