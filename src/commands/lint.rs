//! `hopper lint`: the hazard rules on what the spec compiles to. Offline.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::compile::compile;
use crate::hazard::{self, Finding};
use crate::network::Network;
use crate::output::{self, Format};

/// Check what the spec compiles to for message-loss hazards; exit 1 if any.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  hopper lint topologies/ && hopper apply topologies/")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = match args.spec.load()? {
        Ok(spec) => spec,
        Err(exit) => return Ok(exit),
    };
    let compiled = compile(&spec);
    let findings: Vec<Finding> =
        crate::ops::by_vhost(&compiled).values().flat_map(|t| hazard::check(&Network::from_compiled(t))).collect();
    match format {
        Format::Json => output::json(&findings)?,
        Format::Table => {
            let mut lines: Vec<String> = findings.iter().map(describe).collect();
            lines.push(match findings.len() {
                0 => format!("Clean: no hazard in {} topologies.", compiled.len()),
                n => format!("{n} hazard(s)."),
            });
            output::print(&lines.join("\n"))?;
        }
    }
    Ok(if findings.is_empty() { Exit::Ok } else { Exit::Drift })
}

/// A finding as two lines: what happens, and why RabbitMQ does it.
pub fn describe(f: &Finding) -> String {
    let severity = match f.severity {
        hazard::Severity::Error => output::paint("error", "31"),
        hazard::Severity::Warning => output::paint("warning", "33"),
    };
    format!("{severity} [{}] {}\n    because: {}", f.rule, output::safe(&f.message), f.because)
}
