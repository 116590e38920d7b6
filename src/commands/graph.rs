//! `hopper graph`: where messages go, as DOT or Mermaid, for a spec or a live vhost. Bindings
//! are solid arrows; dead-letter routes dashed, labelled with the reasons that take them.

use std::fmt::Write;

use anyhow::Result;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::http;
use crate::compile::compile;
use crate::network::{DeadLetter, Network, Reason};
use crate::output;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    Dot,
    Mermaid,
}

/// Draw exchanges, queues, bindings and dead-letter routes.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper graph topologies/orders.toml | dot -Tsvg > orders.svg
  hopper graph --style mermaid topologies/
  hopper graph --live --vhost / ")]
pub struct Args {
    /// Spec files or directories; not with --live.
    #[arg(value_name = "SPEC", required_unless_present = "live")]
    pub specs: Vec<std::path::PathBuf>,
    /// Draw the live vhost instead of a spec.
    #[arg(long, conflicts_with = "specs")]
    pub live: bool,
    /// The vhost (with --live), or the spec's vhost override.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub vhost: Option<String>,
    #[arg(long, value_enum, default_value_t = Style::Dot)]
    pub style: Style,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

pub fn run(args: Args) -> Result<Exit> {
    let networks: Vec<(String, Network)> = if args.live {
        let vhost = args.vhost.clone().unwrap_or_else(|| "/".into());
        let endpoint = args.broker.endpoint()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let live = runtime.block_on(http::read(&endpoint, &vhost))?;
        let mut network = Network::from_live(&live);
        // The broker's own exchanges say nothing about where messages go unless something uses
        // them; the default exchange appears on dead-letter edges ("via default exchange").
        let used: std::collections::BTreeSet<String> = network
            .routes
            .iter()
            .flat_map(|r| [r.source.clone(), r.destination.clone()])
            .chain(network.queues.keys().filter_map(|q| network.text(q, "dead-letter-exchange")))
            .collect();
        network.exchanges.retain(|name, _| !name.is_empty() && (!name.starts_with("amq.") || used.contains(name)));
        vec![(vhost, network)]
    } else {
        let spec_args = super::SpecArgs { specs: args.specs.clone(), vhost: args.vhost.clone() };
        let spec = match SpecArgs::load(&spec_args)? {
            Ok(spec) => spec,
            Err(exit) => return Ok(exit),
        };
        let compiled = compile(&spec);
        super::by_vhost(&compiled).into_iter().map(|(v, t)| (v.to_string(), Network::from_compiled(&t))).collect()
    };
    let text = match args.style {
        Style::Dot => dot(&networks),
        Style::Mermaid => mermaid(&networks),
    };
    output::print(&text)?;
    Ok(Exit::Ok)
}

/// Dead-letter edges: (from queue, to queue, label).
fn dead_letter_edges(n: &Network) -> Vec<(String, String, String)> {
    let mut edges = Vec::new();
    for name in n.queues.keys() {
        let reasons: Vec<&str> =
            Reason::ALL.iter().filter(|r| n.can_dead_letter(name, **r)).map(|r| r.as_str()).collect();
        if let DeadLetter::Routed { exchange, routing_key, queues, .. } = n.dead_letter(name) {
            let via = if exchange.is_empty() { "default exchange".to_string() } else { exchange };
            let key = routing_key.map(|k| format!(" \\\"{k}\\\"")).unwrap_or_default();
            for q in queues {
                edges.push((name.clone(), q, format!("{} via {via}{key}", reasons.join(", "))));
            }
        }
    }
    edges
}

fn id(kind: &str, name: &str) -> String {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{kind}_{safe}")
}

pub fn dot(networks: &[(String, Network)]) -> String {
    let mut s = String::from("digraph hopper {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n");
    for (vhost, n) in networks {
        let _ = writeln!(s, "  subgraph \"cluster_{}\" {{\n    label=\"vhost {vhost}\";", id("v", vhost));
        for (name, e) in &n.exchanges {
            let _ = writeln!(
                s,
                "    {} [shape=box, label=\"{name}\\n({})\"];",
                id("x", &format!("{vhost}/{name}")),
                e.kind
            );
        }
        for name in n.queues.keys() {
            let _ = writeln!(s, "    {} [shape=ellipse, label=\"{name}\"];", id("q", &format!("{vhost}/{name}")));
        }
        s.push_str("  }\n");
        for r in &n.routes {
            let to = if r.to_exchange {
                id("x", &format!("{vhost}/{}", r.destination))
            } else {
                id("q", &format!("{vhost}/{}", r.destination))
            };
            let _ = writeln!(
                s,
                "  {} -> {to} [label=\"{}\"];",
                id("x", &format!("{vhost}/{}", r.source)),
                r.routing_key.replace('"', "\\\"")
            );
        }
        for (from, to, label) in dead_letter_edges(n) {
            let _ = writeln!(
                s,
                "  {} -> {} [style=dashed, color=red, fontcolor=red, label=\"dead-letter: {label}\"];",
                id("q", &format!("{vhost}/{from}")),
                id("q", &format!("{vhost}/{to}"))
            );
        }
    }
    s.push_str("}\n");
    s
}

pub fn mermaid(networks: &[(String, Network)]) -> String {
    let mut s = String::from("flowchart LR\n");
    for (vhost, n) in networks {
        let _ = writeln!(s, "  subgraph {}[\"vhost {vhost}\"]", id("v", vhost));
        for (name, e) in &n.exchanges {
            let _ = writeln!(s, "    {}[\"{name} ({})\"]", id("x", &format!("{vhost}/{name}")), e.kind);
        }
        for name in n.queues.keys() {
            let _ = writeln!(s, "    {}([\"{name}\"])", id("q", &format!("{vhost}/{name}")));
        }
        s.push_str("  end\n");
        for r in &n.routes {
            let to = if r.to_exchange {
                id("x", &format!("{vhost}/{}", r.destination))
            } else {
                id("q", &format!("{vhost}/{}", r.destination))
            };
            let key = if r.routing_key.is_empty() { "#quot;#quot;".to_string() } else { r.routing_key.clone() };
            let _ = writeln!(s, "  {} -->|{key}| {to}", id("x", &format!("{vhost}/{}", r.source)));
        }
        for (from, to, label) in dead_letter_edges(n) {
            let label = label.replace("\\\"", "#quot;");
            let _ = writeln!(
                s,
                "  {} -. \"dead-letter: {label}\" .-> {}",
                id("q", &format!("{vhost}/{from}")),
                id("q", &format!("{vhost}/{to}"))
            );
        }
    }
    s
}
