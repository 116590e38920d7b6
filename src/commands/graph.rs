//! `hopper graph`: where messages go, as DOT or Mermaid, for a spec or a live vhost. Bindings
//! are solid arrows; dead-letter routes dashed, labelled with the reasons that take them. Every
//! object is its own node, whatever its name: ids are numbers, names are only ever labels, and
//! labels are escaped for the language they are written in.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Result;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::model::{Destination, ExchangeName, QueueName};
use crate::network::{DeadLetter, Network, Reason};
use crate::{ops, output};

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
    #[arg(long, value_parser = super::vhost_name)]
    pub vhost: Option<String>,
    #[arg(long, value_enum, default_value_t = Style::Dot)]
    pub style: Style,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

pub fn run(args: Args) -> Result<Exit> {
    let networks: Vec<(String, Network)> = if args.live {
        let endpoint = args.broker.endpoint()?;
        let vhost = args.broker.vhost(args.vhost.as_deref(), &endpoint)?;
        let network = ops::graph::live(&endpoint, &vhost)?;
        vec![(vhost, network)]
    } else {
        let spec_args = SpecArgs { specs: args.specs.clone(), vhost: args.vhost.clone() };
        let spec = spec_args.load()?;
        ops::by_vhost(&spec.compiled)
            .into_iter()
            .map(|(v, t)| (v.to_string(), Network::from_compiled(&t, crate::version::CURRENT)))
            .collect()
    };
    let text = match args.style {
        Style::Dot => dot(&networks),
        Style::Mermaid => mermaid(&networks),
    };
    output::data(&text)?;
    Ok(Exit::Ok)
}

/// A node of the drawing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Exchange(ExchangeName),
    Queue(QueueName),
}

/// What one vhost draws: nodes with their ids and labels, and edges between ids.
struct Drawing {
    /// (id, node, label, shape is a box)
    nodes: Vec<(String, String, bool)>,
    /// (from id, to id, label, is a dead-letter route)
    edges: Vec<(String, String, String, bool)>,
}

fn drawing(v: usize, n: &Network) -> Drawing {
    let mut ids: BTreeMap<Node, String> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut id = |node: Node, nodes: &mut Vec<(String, String, bool)>| -> String {
        if let Some(id) = ids.get(&node) {
            return id.clone();
        }
        let new = format!("v{v}n{}", ids.len());
        let (label, boxed) = match &node {
            Node::Exchange(name) => {
                let kind = n.exchanges.get(name).map_or("not declared".to_string(), |e| e.kind.to_string());
                (format!("{name}\n({kind})"), true)
            }
            Node::Queue(name) => (name.to_string(), false),
        };
        nodes.push((new.clone(), label, boxed));
        ids.insert(node, new.clone());
        new
    };
    for name in n.exchange_names() {
        id(Node::Exchange(name.clone()), &mut nodes);
    }
    for name in n.queue_names() {
        id(Node::Queue(name.clone()), &mut nodes);
    }
    let mut edges = Vec::new();
    for b in n.bindings() {
        let from = id(Node::Exchange(b.source.clone()), &mut nodes);
        let to = match &b.destination {
            Destination::Exchange(e) => id(Node::Exchange(e.clone()), &mut nodes),
            Destination::Queue(q) => id(Node::Queue(q.clone()), &mut nodes),
        };
        edges.push((from, to, b.routing_key.to_string(), false));
    }
    // Native retry: the queue holds a failed message back and delivers it again itself.
    for name in n.queue_names() {
        let args = &n.queues[name].arguments;
        if let Some(kind) = args.get(crate::compile::native::DELAYED_RETRY_TYPE) {
            let ms = |key: &str| args.get(key).map_or("?".to_string(), |v| v.to_string());
            let me = id(Node::Queue(name.clone()), &mut nodes);
            let label = format!(
                "delayed retry ({kind}): {} ms × n, at most {} ms",
                ms(crate::compile::native::DELAYED_RETRY_MIN),
                ms(crate::compile::native::DELAYED_RETRY_MAX)
            );
            edges.push((me.clone(), me, label, true));
        }
    }
    for name in n.queue_names() {
        let reasons: Vec<&str> =
            Reason::ALL.iter().filter(|r| n.can_dead_letter(name, **r)).map(|r| r.as_str()).collect();
        if let DeadLetter::Routed { exchange, routing_key, queues, .. } = n.dead_letter(name) {
            let via = if exchange.is_default() { "default exchange".to_string() } else { exchange.to_string() };
            let key = routing_key.map(|k| format!(" \"{k}\"")).unwrap_or_default();
            let from = id(Node::Queue(name.clone()), &mut nodes);
            for q in queues {
                let to = id(Node::Queue(q), &mut nodes);
                edges.push((from.clone(), to, format!("dead-letter: {} via {via}{key}", reasons.join(", ")), true));
            }
        }
    }
    Drawing { nodes, edges }
}

/// A DOT double-quoted string: `"` and `\` escaped, line breaks as DOT's `\n`, other control
/// characters shown as escapes rather than written raw.
pub fn dot_string(text: &str) -> String {
    let mut s = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(s, "\\\\u{{{:x}}}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// A Mermaid quoted label: every character Mermaid gives a meaning to written as an entity code.
pub fn mermaid_string(text: &str) -> String {
    let mut s = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '#' | '|' | '<' | '>' | '&' | '`' | '[' | ']' | '{' | '}' | '(' | ')' | ';' => {
                let _ = write!(s, "#{};", c as u32);
            }
            '\n' => s.push_str("<br>"),
            c if c.is_control() => {
                let _ = write!(s, "\\u{{{:x}}}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

pub fn dot(networks: &[(String, Network)]) -> String {
    let mut s = String::from("digraph hopper {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n");
    for (v, (vhost, n)) in networks.iter().enumerate() {
        let d = drawing(v, n);
        let _ = writeln!(s, "  subgraph cluster_v{v} {{\n    label={};", dot_string(&format!("vhost {vhost}")));
        for (id, label, boxed) in &d.nodes {
            let shape = if *boxed { "box" } else { "ellipse" };
            let _ = writeln!(s, "    {id} [shape={shape}, label={}];", dot_string(label));
        }
        s.push_str("  }\n");
        for (from, to, label, dead_letter) in &d.edges {
            let style = if *dead_letter { "style=dashed, color=red, fontcolor=red, " } else { "" };
            let _ = writeln!(s, "  {from} -> {to} [{style}label={}];", dot_string(label));
        }
    }
    s.push_str("}\n");
    s
}

pub fn mermaid(networks: &[(String, Network)]) -> String {
    let mut s = String::from("flowchart LR\n");
    for (v, (vhost, n)) in networks.iter().enumerate() {
        let d = drawing(v, n);
        let _ = writeln!(s, "  subgraph v{v}[{}]", mermaid_string(&format!("vhost {vhost}")));
        for (id, label, boxed) in &d.nodes {
            let label = mermaid_string(label);
            let _ = if *boxed { writeln!(s, "    {id}[{label}]") } else { writeln!(s, "    {id}([{label}])") };
        }
        s.push_str("  end\n");
        for (from, to, label, dead_letter) in &d.edges {
            let label = mermaid_string(if label.is_empty() { "\"\"" } else { label });
            let _ = if *dead_letter {
                writeln!(s, "  {from} -. {label} .-> {to}")
            } else {
                writeln!(s, "  {from} -- {label} --> {to}")
            };
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_networks(toml: &str) -> Vec<(String, Network)> {
        let spec = crate::spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain()));
        ops::by_vhost(&spec.compiled)
            .into_iter()
            .map(|(v, t)| (v.to_string(), Network::from_compiled(&t, crate::version::CURRENT)))
            .collect()
    }

    #[test]
    fn names_that_looked_alike_as_ids_are_distinct_nodes() {
        let nets = spec_networks(
            "[topology.a]\nqueue = \"svc.a\"\nmax_attempts = 1\n[topology.b]\nqueue = \"svc_a\"\nmax_attempts = 1\n[topology.c]\nqueue = \"é\"\nmax_attempts = 1\n[topology.d]\nqueue = \"ü\"\nmax_attempts = 1\n",
        );
        let d = drawing(0, &nets[0].1);
        let ids: std::collections::BTreeSet<_> = d.nodes.iter().map(|(id, _, _)| id).collect();
        assert_eq!(ids.len(), d.nodes.len());
        let labels: Vec<_> = d.nodes.iter().map(|(_, l, _)| l.as_str()).collect();
        for name in ["svc.a", "svc_a", "é", "ü"] {
            assert!(labels.contains(&name), "{name} in {labels:?}");
        }
    }

    #[test]
    fn labels_are_escaped_for_each_language() {
        assert_eq!(dot_string("a\"b\\c"), r#""a\"b\\c""#);
        let m = mermaid_string("x\"|#y");
        assert!(!m[1..m.len() - 1].contains(['"', '|']), "{m}");
        assert_eq!(m, "\"x#34;#124;#35;y\"");
        assert!(!dot_string("\u{1b}[31m").contains('\u{1b}'));
        assert!(!mermaid_string("\u{1b}[31m").contains('\u{1b}'));
    }
}
