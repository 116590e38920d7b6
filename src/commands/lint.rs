//! `hopper lint`: the hazard rules on what the spec compiles to. Offline.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::hazard::{self, Finding};
use crate::network::Network;
use crate::output::{self, Format};

/// Check what the spec compiles to for message-loss hazards; exit 1 if any.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  hopper lint topologies/ && hopper apply topologies/\n  hopper lint --broker-version 3.10 topologies/"
)]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Judge the spec as this RabbitMQ release runs it (delivery limits, refused arguments,
    /// native delayed retry).
    /// hopper knows 3.10 to 4.3; another release line is refused.
    #[arg(long, value_name = "VERSION", default_value_t = crate::version::CURRENT, value_parser = crate::version::Version::parse_known)]
    pub broker_version: crate::version::Version,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = args.spec.load()?;
    let mut findings: Vec<Finding> = crate::ops::by_vhost(&spec.compiled)
        .values()
        .flat_map(|t| hazard::check(&Network::from_compiled(t, args.broker_version)))
        .collect();
    findings.extend(hazard::check_spec(spec.topologies()));
    match format {
        Format::Json => output::document(&serde_json::json!({
            "broker_version": args.broker_version.to_string(),
            "findings": findings,
        }))?,
        Format::Table => {
            let mut lines: Vec<String> = findings.iter().map(describe).collect();
            lines.push(match findings.len() {
                0 => format!(
                    "Clean: no hazard in {} topologies, judged as RabbitMQ {} runs them.",
                    spec.compiled.len(),
                    args.broker_version
                ),
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
