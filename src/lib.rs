//! hopper compiles RabbitMQ retry topologies from TOML and applies them without losing messages.
//! Data flows one way: spec → compile → plan → broker → output; `ops` orchestrates each
//! operation, `commands` parse arguments and render.

pub mod broker;
pub mod commands;
pub mod compile;
pub mod config;
pub mod contract;
pub mod definitions;
pub mod diagnostic;
pub mod hazard;
pub mod live;
pub mod model;
pub mod network;
pub mod ops;
pub mod output;
pub mod plan;
pub mod policy;
pub mod spec;
pub mod version;

use std::process::ExitCode;

use clap::Parser;

/// Exit codes, documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for `apply`, the broker matches the spec.
    Ok = 0,
    /// Differences found (`diff`, `lint`); reserved for them.
    Drift = 1,
    /// Invalid spec or arguments, broker unreachable, authentication failed.
    Error = 2,
    /// `apply` refused: the broker holds an object the spec cannot reach without losing messages.
    Conflict = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// The whole program, for `main`.
pub fn run() -> ExitCode {
    let cli = commands::Cli::parse();
    match commands::run(cli) {
        Ok(exit) => exit.into(),
        Err(e) if output::is_broken_pipe(&e) => Exit::Ok.into(),
        // Rendered like a spec's diagnostics, with its own last line.
        Err(e) if e.downcast_ref::<config::ConfigError>().is_some() => {
            eprintln!("{e}");
            Exit::Error.into()
        }
        Err(e) => {
            // Errors quote names from specs, brokers and the command line: never raw control
            // characters on a terminal.
            let text = format!("{e:#}");
            let lines: Vec<_> = text.lines().map(output::safe).collect();
            eprintln!("error: {}", lines.join("\n"));
            Exit::Error.into()
        }
    }
}
