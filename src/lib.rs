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
pub mod schedule;
pub mod spec;
pub mod topology;
pub mod version;

use std::process::ExitCode;

/// `hopper --version`: the crate's version and the commit it was built from (see build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("HOPPER_COMMIT"), ")");

/// What a run ended in; `ExitCodes` turns it into a number. Documented in docs/exit-codes.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for `apply`, the broker matches the spec.
    Ok = 0,
    /// Differences found (`diff`, `lint`, `inspect`); with `--detailed-exitcode`, also changes
    /// pending (`apply --dry-run`).
    Drift = 1,
    /// Invalid spec, arguments or plan file, broker unreachable, authentication failed.
    Error = 2,
    /// `apply` refused: the broker holds an object the spec cannot reach without losing messages.
    Conflict = 3,
    /// `apply --plan` refused: the broker (or the plan's spec) is no longer what the plan was made
    /// against. Nothing was changed.
    Stale = 4,
}

/// A failure already told to the user, such as a spec's diagnostics: the run ends in its exit
/// code, and nothing more is printed. Commands return it with `?`.
#[derive(Debug)]
pub struct Reported(pub Exit);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reported above (exit {})", self.0 as u8)
    }
}

impl std::error::Error for Reported {}

/// How an `Exit` becomes a process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCodes {
    /// hopper's own: 1 for drift, 2 for an error.
    Documented,
    /// `--detailed-exitcode`, as terraform's: 2 for changes pending, 1 for an error, so that a
    /// CI gate can tell "something to do" from "something broke". Conflict and stale keep their
    /// own codes (3, 4): both mean apply would refuse.
    Detailed,
}

impl Exit {
    pub fn code(self, codes: ExitCodes) -> u8 {
        match (codes, self) {
            (ExitCodes::Detailed, Exit::Drift) => 2,
            (ExitCodes::Detailed, Exit::Error) => 1,
            (_, exit) => exit as u8,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code(ExitCodes::Documented))
    }
}

/// The whole program, for `main`.
pub fn run() -> ExitCode {
    one_malloc_arena();
    let (cli, codes) = match commands::Cli::parse_args() {
        Ok(parsed) => parsed,
        Err((e, codes)) => {
            // Help and --version are not errors; a usage error is one, in the codes asked for
            // (clap's own 2 would read as "changes pending" to a --detailed-exitcode gate).
            let _ = e.print();
            return if e.use_stderr() { Exit::Error.code(codes).into() } else { Exit::Ok.into() };
        }
    };
    let exit = match commands::run(cli) {
        Ok(exit) => exit,
        Err(e) if output::is_broken_pipe(&e) => Exit::Ok,
        Err(ref e) if let Some(Reported(exit)) = e.downcast_ref::<Reported>() => *exit,
        // Rendered like a spec's diagnostics, with its own last line.
        Err(e) if e.downcast_ref::<config::ConfigError>().is_some() => {
            eprintln!("{e}");
            Exit::Error
        }
        Err(e) => {
            // Errors quote names from specs, brokers and the command line: never raw control
            // characters on a terminal.
            let text = format!("{e:#}");
            let lines: Vec<_> = text.lines().map(output::safe).collect();
            eprintln!("error: {}", lines.join("\n"));
            Exit::Error
        }
    };
    exit.code(codes).into()
}

/// glibc's malloc gives each thread that allocates an arena of its own and keeps what was freed
/// there: the runtime's threads parse the broker's listings, and with an arena each the peak of a
/// no-op apply at 2,000 topologies was 50.5 MB instead of 41.9 MB, at no gain in speed
/// (docs/benchmarks.md). Called before any thread starts; a `MALLOC_ARENA_MAX` in the environment
/// is the user's and wins.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of glibc's allocator; no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}
