//! One file per subcommand, each with its arguments and its `run`.

pub mod apply;
pub mod compile;
pub mod contract;
pub mod diff;
pub mod export;
pub mod graph;
pub mod inspect;
pub mod lint;
pub mod redrive;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::Exit;
use crate::broker::Endpoint;
use crate::output::Format;
use crate::spec::{self, LoadError, Spec};

const EXAMPLES: &str = "\
Examples:
  hopper compile topologies/                 what the spec compiles to, offline
  hopper contract topologies/ --format json  what consumers must do on failure
  hopper export topologies/ > defs.json      RabbitMQ definitions, for import_definitions
  hopper diff topologies/                    the spec against the live broker (exit 1 on drift)
  hopper apply --dry-run topologies/         the plan against the live broker
  hopper apply topologies/                   converge the broker to the spec
  hopper lint topologies/                    message-loss hazards in the spec, offline
  hopper inspect --vhost /                   where messages go on the live broker, and every hazard
  hopper graph topologies/ | dot -Tsvg       exchanges, queues, bindings and dead-letter routes
  hopper redrive topologies/ --dry-run       dead letters back to their main queue (--dry-run: what would move)";

#[derive(Debug, Parser)]
#[command(name = "hopper", version, about = "Compile, apply and explain RabbitMQ retry topologies", after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Apply(apply::Args),
    Compile(compile::Args),
    Contract(contract::Args),
    Diff(diff::Args),
    Export(export::Args),
    Graph(graph::Args),
    Inspect(inspect::Args),
    Lint(lint::Args),
    Redrive(redrive::Args),
}

/// Spec files or directories of `*.toml`, shared by every command.
#[derive(Debug, clap::Args)]
pub struct SpecArgs {
    /// Spec files, or directories of *.toml files.
    #[arg(required = true, value_name = "SPEC")]
    pub specs: Vec<PathBuf>,
    /// Use this vhost for every topology, whatever the files say.
    #[arg(long, value_parser = vhost_name)]
    pub vhost: Option<String>,
}

impl SpecArgs {
    /// The validated spec, or `Exit::Error` once every problem has been printed.
    pub fn load(&self) -> Result<Result<Spec, Exit>> {
        match spec::load(&self.specs, self.vhost.as_deref()) {
            Ok(spec) => Ok(Ok(spec)),
            Err(LoadError::Io(message)) => {
                eprintln!("error: {message}");
                Ok(Err(Exit::Error))
            }
            Err(LoadError::Invalid(e)) => {
                e.emit();
                Ok(Err(Exit::Error))
            }
        }
    }
}

/// A vhost name from the command line: the same rules as in a spec.
pub fn vhost_name(value: &str) -> Result<String, String> {
    match spec::vhost_problem(value) {
        Some(problem) => Err(problem),
        None => Ok(value.to_string()),
    }
}

/// How to reach the broker.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// AMQP URL; several, comma-separated, name the nodes of a cluster, tried in turn.
    #[arg(
        long,
        env = "HOPPER_AMQP_URL",
        default_value = "amqp://guest:guest@localhost:5672",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub amqp_url: String,
    /// Management API base URL [default: the first node's host, port 15672, path /api].
    #[arg(long, env = "HOPPER_MANAGEMENT_URL", hide_env_values = true)]
    pub management_url: Option<String>,
}

impl BrokerArgs {
    pub fn endpoint(&self) -> Result<Endpoint> {
        Endpoint::new(&self.amqp_url, self.management_url.as_deref())
    }
}

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Apply(args) => apply::run(args, cli.format),
        Command::Compile(args) => compile::run(args, cli.format),
        Command::Contract(args) => contract::run(args, cli.format),
        Command::Diff(args) => diff::run(args, cli.format),
        Command::Export(args) => export::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Inspect(args) => inspect::run(args, cli.format),
        Command::Lint(args) => lint::run(args, cli.format),
        Command::Redrive(args) => redrive::run(args, cli.format),
    }
}
