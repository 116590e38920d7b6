//! The benchmarks page's generated part and its chart, from the data the runs leave beside it
//! (docs/benchmarks.json): a run of one broker replaces that broker's results, and the page is
//! written again from all of them, so it never mixes what was measured with how it reads.

use std::fmt::Write as _;

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use crate::{Machine, MoveResult, Offline, Paired, Report, SizeResult, Step};

/// Everything the page shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Data {
    /// One a broker and queue type; a run `--against` other builds is kept apart, a comparison.
    #[serde(default)]
    pub curves: Vec<Report>,
    /// One a broker, queue type and body size.
    #[serde(default)]
    pub moves: Vec<MoveResult>,
    #[serde(default)]
    pub offline: Option<Offline>,
}

/// The builds a run was compared against, by name: part of what identifies its result.
fn builds(r: &Report) -> Vec<String> {
    r.sizes.first().map(|s| s.against.iter().map(|a| a.build.clone()).collect()).unwrap_or_default()
}

/// "4.3" -> (4, 3), for the matrix's order.
fn minor(name: &str) -> (u32, u32) {
    let mut parts = name.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

impl Data {
    /// `new`'s results in place of the same broker's (and queue type's, builds', body size's):
    /// a run of some sizes replaces those sizes only, and an earlier run keeps the others (a
    /// 10,000-topology run alone took 26 minutes; its 500 and 2,000 need not go again).
    pub fn merge(&mut self, new: Data) {
        for r in new.curves {
            let same = |o: &Report| (&o.broker, &o.queue_type, builds(o)) == (&r.broker, &r.queue_type, builds(&r));
            for o in self.curves.iter_mut().filter(|o| same(o)) {
                o.sizes.retain(|s| !r.sizes.iter().any(|n| n.topologies == s.topologies));
            }
            self.curves.retain(|o| !o.sizes.is_empty());
            self.curves.push(r);
        }
        self.curves.sort_by_key(|r| (builds(r), minor(&r.broker), r.queue_type.clone()));
        for m in new.moves {
            self.moves.retain(|o| (&o.broker, &o.queue_type, o.bytes) != (&m.broker, &m.queue_type, m.bytes));
            self.moves.push(m);
        }
        self.moves.sort_by_key(|m| (m.bytes, minor(&m.broker), m.queue_type.clone()));
        if new.offline.is_some() {
            self.offline = new.offline;
        }
    }

    /// A report a broker and queue type: every run's sizes together, a plain run's figures for
    /// a size before a comparison's (whose own build's figures are a curve too).
    fn curve(&self) -> Vec<Report> {
        let mut curve: Vec<Report> = vec![];
        let plain = |r: &Report| builds(r).is_empty();
        for r in self.curves.iter().filter(|r| plain(r)).chain(self.curves.iter().filter(|r| !plain(r))) {
            match curve.iter_mut().find(|c| (&c.broker, &c.queue_type) == (&r.broker, &r.queue_type)) {
                None => curve.push(r.clone()),
                Some(c) => {
                    let new: Vec<_> = r
                        .sizes
                        .iter()
                        .filter(|s| c.sizes.iter().all(|o| o.topologies != s.topologies))
                        .cloned()
                        .collect();
                    c.sizes.extend(new);
                    c.sizes.sort_by_key(|s| s.topologies);
                }
            }
        }
        curve.sort_by_key(|r| (minor(&r.broker), r.queue_type.clone()));
        curve
    }
}

pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn secs(m: f64) -> String {
    match m {
        m if m < 1.0 => format!("{m:.3} s"),
        m if m < 10.0 => format!("{m:.2} s"),
        m => format!("{m:.1} s"),
    }
}

/// `**1.08×**, 1.02–1.15`: the median ratio (bold or not), then its interval.
fn paired(p: &Paired, bold: bool) -> String {
    let median = if bold { format!("**{:.2}×**", p.median) } else { format!("{:.2}×", p.median) };
    match p.interval {
        Some((lo, hi)) => format!("{median}, {lo:.2}–{hi:.2}"),
        None => median,
    }
}

fn machine(m: &Machine) -> String {
    format!(
        "{} CPUs ({}), {} GiB, Linux {}, load average {} at the end",
        m.cpus, m.cpu_model, m.memory_gib, m.kernel, m.load
    )
}

/// hopper's CPU time (median) and peak memory, after its wall time.
fn mem(step: &Step) -> String {
    let cpu = step.cpu().map(|c| format!(" (CPU {c:.2} s)")).unwrap_or_default();
    format!("{cpu}{}", step.peak_mb().map(|m| format!(", {m:.0} MB")).unwrap_or_default())
}

fn fastest_import(s: &SizeResult) -> Option<f64> {
    [s.ctl_import.median(), s.http_import.median()].into_iter().flatten().reduce(f64::min)
}

/// The page's generated part: the headline, the chart, each broker's table, the comparisons of
/// builds, moving messages and the offline commands.
pub fn markdown(data: &Data) -> String {
    let mut out = String::new();
    let curve = data.curve();
    if !curve.is_empty() {
        let _ = writeln!(
            out,
            "![The curve: hopper's first apply against the broker's faster import, and its no-op apply and diff against the cheapest complete listing, by topologies, on each broker](benchmarks.svg)\n"
        );
        out.push_str(&headline(&curve));
    }
    for r in &curve {
        out.push('\n');
        out.push_str(&broker_table(r));
    }
    let comparisons: Vec<&Report> = data.curves.iter().filter(|r| !builds(r).is_empty()).collect();
    if !comparisons.is_empty() {
        out.push_str("\n### Builds compared, round by round\n\n");
        for r in comparisons {
            out.push_str(&comparison(r));
        }
    }
    if !data.moves.is_empty() {
        out.push_str("\n### Moving messages\n\n");
        out.push_str(&moves(&data.moves));
    }
    if let Some(o) = &data.offline {
        out.push_str("\n### Offline\n\n");
        out.push_str(&offline(o));
    }
    out
}

/// One line a broker and size: the ratios the curve is drawn from.
fn headline(curve: &[Report]) -> String {
    let mut out = String::from(
        "| RabbitMQ | topologies | first apply ÷ faster import | no-op apply ÷ listing | `diff` ÷ listing | listing |\n|---|---|---|---|---|---|\n",
    );
    for r in curve {
        for s in &r.sizes {
            let p = |step: &Step| Paired::of(step, &s.listing).map_or("—".into(), |p| paired(&p, false));
            let first = match (s.apply.median(), fastest_import(s)) {
                (Some(a), Some(i)) if i > 0.0 => format!("{:.2}× ({} ÷ {})", a / i, secs(a), secs(i)),
                _ => "—".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {first} | {} | {} | {} |",
                r.version,
                thousands(s.topologies),
                p(&s.noop),
                p(&s.diff),
                s.listing.median().map_or("—".into(), secs)
            );
        }
    }
    out
}

/// The broker's table: one column per size, one row per step.
pub fn broker_table(report: &Report) -> String {
    let mut out = String::new();
    let sizes = &report.sizes;
    let _ = writeln!(
        out,
        "**RabbitMQ {}**, {} queues, {}, hopper {}\n",
        report.version, report.queue_type, report.date, report.commit
    );
    let mut header = "| step |".to_string();
    let mut rule = "|---|".to_string();
    for s in sizes {
        let _ = write!(header, " {} topologies ({} objects) |", thousands(s.topologies), thousands(s.total_objects()));
        rule.push_str("---|");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    type Cell = Box<dyn Fn(&SizeResult) -> Option<String>>;
    let timed = |get: fn(&SizeResult) -> &Step| -> Cell {
        Box::new(move |s| get(s).median().map(|t| format!("{}{}", secs(t), mem(get(s)))))
    };
    let against_listing = |get: fn(&SizeResult) -> &Step| -> Cell {
        Box::new(move |s| {
            let t = secs(get(s).median()?);
            let r = Paired::of(get(s), &s.listing).map(|p| format!(" ({})", paired(&p, true))).unwrap_or_default();
            Some(format!("{t}{}{r}", mem(get(s))))
        })
    };
    let rows: Vec<(&str, Cell)> = vec![
        ("`hopper apply` into an empty vhost", timed(|s| &s.apply)),
        ("`rabbitmqctl import_definitions`, until a listing shows every object", timed(|s| &s.ctl_import)),
        (
            "`POST /api/definitions/{vhost}`",
            Box::new(move |s| timed(|s| &s.http_import)(s).or_else(|| s.http_refused.clone())),
        ),
        (
            "first apply ÷ the faster import",
            Box::new(move |s| Some(format!("**{:.2}×**", s.apply.median()? / fastest_import(s)?))),
        ),
        (
            "objects a second: hopper / the faster import",
            Box::new(move |s| {
                let o = s.total_objects() as f64;
                Some(format!("{:.0} / {:.0}", o / s.apply.median()?, o / fastest_import(s)?))
            }),
        ),
        ("cheapest complete listing (3 GETs at once on new connections, no statistics)", timed(|s| &s.listing)),
        (
            "the same on connections kept alive from the round before (÷ listing)",
            against_listing(|s| &s.listing_kept_alive),
        ),
        ("`hopper apply`, no-op (÷ listing)", against_listing(|s| &s.noop)),
        ("`hopper diff` (÷ listing)", against_listing(|s| &s.diff)),
        ("`hopper apply --dry-run` (÷ listing)", against_listing(|s| &s.dry_run)),
        ("`hopper inspect --vhost`, with counts (÷ listing)", against_listing(|s| &s.inspect)),
        ("`hopper export`, offline", timed(|s| &s.export)),
        ("`hopper lint`, offline", timed(|s| &s.lint)),
        (
            "hopper's peak memory, any command",
            Box::new(|s| {
                [&s.apply, &s.noop, &s.diff, &s.dry_run, &s.inspect, &s.export, &s.lint]
                    .iter()
                    .filter_map(|st| st.peak_mb())
                    .reduce(f64::max)
                    .map(|m| format!("**{m:.0} MB**"))
            }),
        ),
    ];
    for (label, cell) in rows {
        let mut line = format!("| {label} |");
        for s in sizes {
            let _ = write!(line, " {} |", cell(s).unwrap_or_else(|| "—".into()));
        }
        let _ = writeln!(out, "{line}");
    }
    let rounds: Vec<String> = sizes.iter().map(|s| s.listing.samples.len().to_string()).collect();
    let _ = writeln!(
        out,
        "\nMedian wall time of {} runs ({} for first apply and each import, each into a fresh vhost; the reads: {} rounds); {}.",
        report.repeats,
        report.fresh,
        rounds.join(", "),
        machine(&report.machine)
    );
    let busy: Vec<String> = sizes.iter().filter_map(|s| s.settled).map(|s| format!("{:.0}%", s.busy * 100.0)).collect();
    if !busy.is_empty() {
        let _ = writeln!(out, "The machine was {} busy when each size's reads began.", busy.join(", "));
    }
    if let Some(failure) = &report.failure {
        let _ = writeln!(out, "- {failure}");
    }
    for s in sizes {
        for note in &s.notes {
            let _ = writeln!(out, "- {}: {note}", thousands(s.topologies));
        }
    }
    out
}

/// A run `--against` other builds: each build's no-op apply and `diff` over this build's,
/// paired by round, with each one's peak memory.
fn comparison(r: &Report) -> String {
    let mut out = format!(
        "**RabbitMQ {}**, {} queues, {}: hopper {} (the reference) and {}\n\n| topologies | rounds | build | no-op apply ÷ the reference | `diff` ÷ the reference | `diff`: CPU, peak memory |\n|---|---|---|---|---|---|\n",
        r.version,
        r.queue_type,
        r.date,
        r.commit,
        builds(r).iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(", "),
    );
    let usage = |s: &Step| {
        format!("{:.2} s, {}", s.cpu().unwrap_or(0.0), s.peak_mb().map_or("—".into(), |m| format!("{m:.0} MB")))
    };
    for s in &r.sizes {
        let _ = writeln!(
            out,
            "| {} | {} | the reference | {} | {} | {} |",
            thousands(s.topologies),
            s.noop.samples.len(),
            s.noop.median().map_or("—".into(), secs),
            s.diff.median().map_or("—".into(), secs),
            usage(&s.diff)
        );
        for a in &s.against {
            let p = |x: &Step, y: &Step| Paired::of(x, y).map_or("—".into(), |p| paired(&p, true));
            let _ = writeln!(
                out,
                "| | | `{}` | {} | {} | {} |",
                a.build,
                p(&a.noop, &s.noop),
                p(&a.diff, &s.diff),
                usage(&a.diff)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nEach round ran every build's no-op apply and `diff` once, interleaved with the other reads; a ratio is the median of the rounds' ratios to the reference's, then its 95% interval; the reference's row gives its median times. CPU: the median; peak memory: the largest. {}.\n",
        machine(&r.machine)
    );
    out
}

fn moves(results: &[MoveResult]) -> String {
    let mut out = String::from(
        "| RabbitMQ, queues | messages × body | hopper redrive (peak memory) | shovel \"Move messages\" | shovel ÷ redrive | apply --migrate (peak memory) |\n|---|---|---|---|---|---|\n",
    );
    for m in results {
        let rate = |step: &Step, moved: usize| -> Option<String> {
            let secs = step.median()?;
            let mem = step.peak_mb().map(|mb| format!(", {mb:.0} MB")).unwrap_or_default();
            Some(format!("**{} msg/s** ({secs:.2} s{mem})", thousands((moved as f64 / secs).round() as usize)))
        };
        let shovel = rate(&m.shovel, m.messages)
            .or_else(|| m.no_shovel.as_ref().map(|why| format!("— ({why})")))
            .unwrap_or_else(|| "—".into());
        let ratio = match (m.redrive.median(), m.shovel.median()) {
            (Some(h), Some(s)) if s > 0.0 => format!("{:.1}×", h / s),
            _ => "—".into(),
        };
        let body = match m.bytes {
            b if b >= 1 << 20 => format!("{} MB", b >> 20),
            b if b >= 1 << 10 => format!("{} KB", b >> 10),
            b => format!("{b} B"),
        };
        let _ = writeln!(
            out,
            "| {}, {} | {} × {body} | {} | {shovel} | {ratio} | {} |",
            m.version,
            m.queue_type,
            thousands(m.messages),
            rate(&m.redrive, m.messages).unwrap_or_else(|| "—".into()),
            rate(&m.migrate, 2 * m.messages).unwrap_or_else(|| "—".into())
        );
    }
    if let Some(m) = results.first() {
        let runs = m.redrive.samples.len();
        let _ = writeln!(
            out,
            "\nMedian of {runs} runs, {}, hopper {}; `apply --migrate` moves every message twice (out to its holding queue and back); {}.",
            m.date,
            m.commit,
            machine(&m.machine)
        );
    }
    out
}

fn offline(o: &Offline) -> String {
    let mut out = format!(
        "| {} topologies ({} objects), offline | wall time | peak memory |\n|---|---|---|\n",
        thousands(o.topologies),
        thousands(14 * o.topologies)
    );
    for (command, s) in &o.commands {
        let _ = writeln!(out, "| `hopper {command}` | {} | {:.0} MB |", secs(s.secs), s.peak_mb.unwrap_or(0.0));
    }
    let _ = writeln!(out, "\n{}, hopper {}; {}.", o.date, o.commit, machine(&o.machine));
    out
}

const BEGIN: &str = "<!-- bench:begin: written by scripts/bench --write from benchmarks.json -->";
const END: &str = "<!-- bench:end -->";

/// `text` with `generated` between the page's markers.
pub fn replace_generated(text: &str, generated: &str) -> Result<String> {
    let start = text.find(BEGIN).ok_or_else(|| anyhow!("no `{BEGIN}` marker"))? + BEGIN.len();
    let stop = start + text[start..].find(END).ok_or_else(|| anyhow!("no `{END}` marker after the begin marker"))?;
    Ok(format!("{}\n\n{}\n{}", &text[..start], generated.trim_end(), &text[stop..]))
}

// ---------------------------------------------------------------------------------------------
// The chart: hand-written SVG, a column a broker; above, the seconds (both axes logarithmic),
// below, hopper's over the broker's own (the ratios the curve is about, with their intervals)
// ---------------------------------------------------------------------------------------------

/// A line of the seconds' panels: label, colour, dash, and the step's median at a size.
type Series = (&'static str, &'static str, &'static str, fn(&SizeResult) -> Option<f64>);

const SECONDS: [Series; 5] = [
    ("hopper apply, first", "#1f77b4", "", |s| s.apply.median()),
    ("the broker's faster import", "#1f77b4", "6 4", fastest_import),
    ("hopper apply, no-op", "#d62728", "", |s| s.noop.median()),
    ("hopper diff", "#ff7f0e", "2 3", |s| s.diff.median()),
    ("cheapest complete listing", "#555555", "6 4", |s| s.listing.median()),
];

/// A line of the ratios' panels: label, colour, dash, and the ratio at a size with its interval.
type Ratio = (&'static str, &'static str, &'static str, fn(&SizeResult) -> Option<(f64, Option<(f64, f64)>)>);

const RATIOS: [Ratio; 3] = [
    ("first apply ÷ faster import", "#1f77b4", "", |s| Some((s.apply.median()? / fastest_import(s)?, None))),
    ("no-op apply ÷ listing", "#d62728", "", |s| Paired::of(&s.noop, &s.listing).map(|p| (p.median, p.interval))),
    ("diff ÷ listing", "#ff7f0e", "2 3", |s| Paired::of(&s.diff, &s.listing).map(|p| (p.median, p.interval))),
];

/// The curve as an SVG document.
pub fn svg(data: &Data) -> String {
    let curve = data.curve();
    let (pw, ph, rh, left, top, gap) = (300.0, 230.0, 170.0, 64.0, 52.0, 30.0);
    let rtop = top + ph + 40.0;
    let legend = 22.0 * (SECONDS.len() + RATIOS.len()).div_ceil(3) as f64;
    let width = left + curve.len().max(1) as f64 * (pw + gap);
    let height = rtop + rh + 56.0 + legend;
    let sizes = || curve.iter().flat_map(|r| r.sizes.iter());
    let seconds = decades(sizes().flat_map(|s| SECONDS.iter().filter_map(|x| (x.3)(s))));
    let ratios = sizes().flat_map(|s| RATIOS.iter().filter_map(|x| (x.3)(s)));
    let (rlo, rhi) = ratios.fold((0.5f64, 1.5f64), |(lo, hi), (r, i)| {
        let (a, b) = i.unwrap_or((r, r));
        (lo.min(a), hi.max(b))
    });
    // Gridlines a quarter or a half apart, one of them at 1×.
    let tick = if rhi - rlo > 1.5 { 0.5 } else { 0.25 };
    let (rlo, rhi) = ((rlo / tick).floor() * tick, (rhi / tick).ceil() * tick);
    let n = |s: &SizeResult| (s.topologies as f64).log10();
    let (xlo, xhi) = (sizes().map(n).fold(f64::MAX, f64::min) - 0.1, sizes().map(n).fold(0.0, f64::max) + 0.1);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"16\" fill=\"#444\">Above: median wall time in seconds. Below: hopper's time over the broker's own, with its 95% interval. Topologies on a log scale.</text>\n"
    );
    for (i, r) in curve.iter().enumerate() {
        let x0 = left + i as f64 * (pw + gap);
        let x = |s: &SizeResult| x0 + (n(s) - xlo) / (xhi - xlo) * pw;
        let ys = |v: f64| top + ph - (v.log10() - seconds.0) / (seconds.1 - seconds.0) * ph;
        let yr = |v: f64| rtop + rh - (v - rlo) / (rhi - rlo) * rh;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">RabbitMQ {}</text>",
            x0 + pw / 2.0,
            top - 10.0,
            r.version
        );
        for (y0, h) in [(top, ph), (rtop, rh)] {
            let _ = writeln!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{pw:.1}\" height=\"{h:.1}\" fill=\"none\" stroke=\"#999\"/>"
            );
        }
        let mut grid = |y: f64, label: String, strong: bool| {
            let stroke = if strong { "#888" } else { "#ddd" };
            let _ = writeln!(
                out,
                "<line x1=\"{x0:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{stroke}\"/>",
                x0 + pw
            );
            if i == 0 {
                let _ = writeln!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                    x0 - 6.0,
                    y + 4.0
                );
            }
        };
        for d in (seconds.0 as i32)..=(seconds.1 as i32) {
            let v = 10f64.powi(d);
            grid(ys(v), if d < 0 { format!("{v:.*} s", (-d) as usize) } else { format!("{v:.0} s") }, false);
        }
        let steps = ((rhi - rlo) / tick).round() as i32;
        for k in 0..=steps {
            let v = rlo + f64::from(k) * tick;
            grid(yr(v), format!("{v:.2}×"), (v - 1.0).abs() < 1e-9);
        }
        for s in &r.sizes {
            let xx = x(s);
            let _ = writeln!(
                out,
                "<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                rtop + rh + 16.0,
                thousands(s.topologies)
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">topologies (15 objects each)</text>",
            x0 + pw / 2.0,
            rtop + rh + 34.0
        );
        for (_, colour, dash, get) in SECONDS {
            let points: Vec<(f64, f64)> = r.sizes.iter().filter_map(|s| Some((x(s), ys(get(s)?)))).collect();
            line(&mut out, &points, colour, dash);
        }
        for (k, (_, colour, dash, get)) in RATIOS.iter().enumerate() {
            // Side by side at each size, a few pixels apart, so that the intervals do not hide
            // one another.
            let shift = (k as f64 - 1.0) * 5.0;
            let points: Vec<(f64, f64)> = r.sizes.iter().filter_map(|s| Some((x(s) + shift, yr(get(s)?.0)))).collect();
            line(&mut out, &points, colour, dash);
            for s in &r.sizes {
                if let Some((_, Some((lo, hi)))) = get(s) {
                    let xx = x(s) + shift;
                    let _ = writeln!(
                        out,
                        "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"1.5\"/>",
                        yr(lo),
                        yr(hi)
                    );
                }
            }
        }
    }
    let ly = rtop + rh + 58.0;
    let labels = SECONDS.iter().map(|s| (s.0, s.1, s.2)).chain(RATIOS.iter().map(|r| (r.0, r.1, r.2)));
    for (k, (label, colour, dash)) in labels.enumerate() {
        let (lx, y) = (left + (k % 3) as f64 * 300.0, ly + (k / 3) as f64 * 22.0);
        let _ = writeln!(
            out,
            "<line x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
            lx + 36.0,
            lx + 44.0,
            y + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A polyline with a dot at each point.
fn line(out: &mut String, points: &[(f64, f64)], colour: &str, dash: &str) {
    let text: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>",
        text.join(" ")
    );
    for (x, y) in points {
        let _ = writeln!(out, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{colour}\"/>");
    }
}

/// The whole decades (as powers of ten) that hold every value.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.filter(|v| *v > 0.0).fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi == 0.0 { (-1.0, 2.0) } else { (lo.log10().floor(), hi.log10().ceil().max(lo.log10().floor() + 1.0)) }
}
