//! One file per subcommand, each with its arguments and its `run`.

pub mod apply;
pub mod compile;
pub mod completions;
pub mod config;
pub mod contract;
pub mod diff;
pub mod export;
pub mod graph;
pub mod inspect;
pub mod lint;
pub mod man;
pub mod redrive;
pub mod schedule;
pub mod schema;

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::broker::Endpoint;
use crate::config::Setting;
use crate::output::{self, Format, Verbosity};
use crate::spec::{self, LoadError, Spec};
use crate::{Exit, ExitCodes, Reported};

const EXAMPLES: &str = "\
Examples:
  hopper compile topologies/                 what the spec compiles to, offline
  hopper contract topologies/ --format json  what consumers must do on failure
  hopper export topologies/ > defs.json      RabbitMQ definitions, for import_definitions
  hopper diff topologies/                    the spec against the live broker (exit 1 on drift)
  hopper apply --dry-run topologies/         the plan against the live broker
  hopper apply topologies/                   converge the broker to the spec
  hopper lint topologies/                    message-loss hazards in the spec, offline
  hopper schedule topologies/                each hop's delay range, when a failing message is parked, what it costs
  hopper inspect --vhost /                   where messages go on the live broker, and every hazard
  hopper graph topologies/ | dot -Tsvg       exchanges, queues, bindings and dead-letter routes
  hopper config show --context prod          the broker settings a run would use, and where each came from
  hopper schema > hopper.schema.json         JSON Schema of the spec, for editors (taplo)
  hopper redrive topologies/ --dry-run       dead letters back to their main queue (--dry-run: what would move)";

#[derive(Debug, Parser)]
#[command(name = "hopper", version = crate::VERSION, about = "Compile, apply and explain RabbitMQ retry topologies", after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Output format: table (for people) or json (for programs; apply, compile, contract, diff,
    /// inspect, lint, and export and schema, which only print JSON).
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Whether --format was given, rather than defaulted: a command that cannot print the format
    /// asked for refuses it.
    #[arg(skip)]
    pub format_given: bool,
    /// Print only errors and machine output (JSON, DOT, definitions); the exit code says the rest.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also say what hopper is doing, on stderr: which files, broker, cluster and vhosts.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

impl Cli {
    /// Parses the command line. On a usage error, also the exit codes it asked for, so that
    /// the error exits in them.
    pub fn parse_args() -> Result<(Cli, ExitCodes), (clap::Error, ExitCodes)> {
        let asked = if std::env::args_os().any(|a| a == "--detailed-exitcode") {
            ExitCodes::Detailed
        } else {
            ExitCodes::Documented
        };
        let matches = Cli::command().try_get_matches().map_err(|e| (e, asked))?;
        let mut cli = Cli::from_arg_matches(&matches).map_err(|e| (e, asked))?;
        cli.format_given = matches.value_source("format") == Some(ValueSource::CommandLine)
            || matches.subcommand().is_some_and(|(_, m)| m.value_source("format") == Some(ValueSource::CommandLine));
        let codes = cli.command.exit_codes();
        Ok((cli, codes))
    }

    pub fn verbosity(&self) -> Verbosity {
        match (self.quiet, self.verbose) {
            (true, _) => Verbosity::Quiet,
            (false, true) => Verbosity::Verbose,
            (false, false) => Verbosity::Normal,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Apply(apply::Args),
    Compile(compile::Args),
    /// Show how hopper reaches the broker: each setting and where it came from
    #[command(subcommand)]
    Config(config::Command),
    Contract(contract::Args),
    Diff(diff::Args),
    Export(export::Args),
    Graph(graph::Args),
    Inspect(inspect::Args),
    Lint(lint::Args),
    Redrive(redrive::Args),
    Schedule(schedule::Args),
    Schema(schema::Args),
    Completions(completions::Args),
    Man(man::Args),
}

impl Command {
    fn exit_codes(&self) -> ExitCodes {
        let detailed = match self {
            Command::Apply(a) => a.detailed_exitcode,
            Command::Diff(a) => a.detailed_exitcode,
            _ => false,
        };
        if detailed { ExitCodes::Detailed } else { ExitCodes::Documented }
    }

    fn name(&self) -> &'static str {
        match self {
            Command::Apply(_) => "apply",
            Command::Compile(_) => "compile",
            Command::Config(_) => "config",
            Command::Contract(_) => "contract",
            Command::Diff(_) => "diff",
            Command::Export(_) => "export",
            Command::Graph(_) => "graph",
            Command::Inspect(_) => "inspect",
            Command::Lint(_) => "lint",
            Command::Redrive(_) => "redrive",
            Command::Schedule(_) => "schedule",
            Command::Schema(_) => "schema",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
        }
    }

    /// The formats the command can print, and what it prints otherwise.
    fn formats(&self) -> (&'static [Format], &'static str) {
        const BOTH: &[Format] = &[Format::Table, Format::Json];
        match self {
            Command::Apply(_)
            | Command::Compile(_)
            | Command::Config(_)
            | Command::Contract(_)
            | Command::Diff(_)
            | Command::Inspect(_)
            | Command::Lint(_)
            | Command::Redrive(_)
            | Command::Schedule(_) => (BOTH, ""),
            Command::Export(_) => (&[Format::Json], "it prints RabbitMQ definitions, which are JSON"),
            Command::Schema(_) => (&[Format::Json], "it prints a JSON Schema"),
            Command::Graph(_) => (&[], "it draws DOT or Mermaid: choose with --style"),
            Command::Completions(_) => (&[], "it prints a shell script"),
            Command::Man(_) => (&[], "it prints a man page (roff)"),
        }
    }
}

/// Spec files as read: (path, text), in order.
pub type SpecFiles = Vec<(PathBuf, String)>;

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
    /// The validated spec; once every problem has been printed, `crate::Reported`.
    pub fn load(&self) -> Result<Spec> {
        self.load_for(None)
    }

    /// As `load`, for a run against `endpoint`: the vhost its URL names counts too (`vhosts`).
    pub fn load_for(&self, endpoint: Option<&Endpoint>) -> Result<Spec> {
        Ok(self.load_sources_for(endpoint)?.0)
    }

    /// The validated spec and the files it was read from; once every problem has been printed,
    /// `crate::Reported`.
    pub fn load_sources_for(&self, endpoint: Option<&Endpoint>) -> Result<(Spec, SpecFiles)> {
        let vhosts = vhosts(self.vhost.as_deref(), endpoint)?;
        let sources = match spec::read(&self.specs) {
            Ok((sources, skipped)) => {
                skipped.iter().for_each(note_skipped);
                sources
            }
            Err(e) => return Err(Reported(load_failed(e)).into()),
        };
        let files: Vec<(PathBuf, String)> = sources.iter().map(|(p, t)| (p.to_path_buf(), t.to_string())).collect();
        Ok((validated(sources, vhosts)?, files))
    }
}

/// Which vhost each topology is in: `--vhost`'s, else the one the AMQP URL names where a file
/// names none. `--vhost` and the URL naming two vhosts is refused: hopper will not guess.
pub fn vhosts<'a>(flag: Option<&'a str>, endpoint: Option<&'a Endpoint>) -> Result<spec::Vhosts<'a>> {
    match (flag, endpoint.and_then(|e| e.vhost.as_deref())) {
        (Some(flag), Some(url)) if flag != url => bail!(
            "--vhost `{flag}` and the vhost of the AMQP URL, `{url}`, disagree: hopper will not guess which one is meant; drop one of them, or make them the same (nothing was read or written)"
        ),
        (Some(flag), _) => Ok(spec::Vhosts::Override(flag)),
        (None, Some(url)) => Ok(spec::Vhosts::OfTheUrl(url)),
        (None, None) => Ok(spec::Vhosts::AsWritten),
    }
}

/// Parses and validates files already read; `Reported` once every problem has been printed.
pub fn validated(sources: spec::Sources, vhosts: spec::Vhosts<'_>) -> Result<Spec> {
    // The first few files by name: a directory of 10,000 specs would make one line of 400 kB.
    const NAMED: usize = 5;
    let files = sources.iter().count();
    let mut names: Vec<String> = sources.iter().take(NAMED).map(|(p, _)| p.display().to_string()).collect();
    if files > NAMED {
        names.push(format!("and {} more file(s)", files - NAMED));
    }
    match spec::from_sources(sources, vhosts) {
        Ok(spec) => {
            output::narrate(|| format!("spec: {} topologies read from {}", spec.compiled.len(), names.join(", ")));
            Ok(spec)
        }
        Err(e) => Err(Reported(load_failed(LoadError::Invalid(e))).into()),
    }
}

/// A note on stderr (not with `-q`): what the user named or a directory holds and was not read.
fn note_skipped(skipped: &spec::Skipped) {
    if output::verbosity() == output::Verbosity::Quiet {
        return;
    }
    let line = match skipped {
        spec::Skipped::SameFile { path, first } if path == first => {
            format!("{} is named twice; read once", path.display())
        }
        spec::Skipped::SameFile { path, first } => {
            format!("{} is the same file as {}; read once", path.display(), first.display())
        }
        spec::Skipped::Subdirectory(dir) => {
            format!("{} not read: hopper does not read subdirectories; name it to read its *.toml files", dir.display())
        }
        spec::Skipped::OtherCase(file) => {
            format!("{} not read: spec files end in `.toml`, in lower case; rename it to read it", file.display())
        }
    };
    eprintln!("note: {}", output::safe(&line));
}

fn load_failed(e: LoadError) -> Exit {
    match e {
        LoadError::Io(message) => eprintln!("error: {}", output::safe(&message)),
        LoadError::Invalid(e) => e.emit(),
    }
    Exit::Error
}

/// Dead letters by first death, as `inspect --dead-letters` and `redrive` show them.
fn first_deaths(groups: &[crate::ops::dead_letters::Group]) -> String {
    let mut table = output::table(&["first died in", "reason", "messages", "oldest", "newest"]);
    let time = |t: Option<u64>| {
        t.map_or("?".to_string(), |t| {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)).to_string()
        })
    };
    for g in groups {
        table.add_row(vec![
            output::safe(&g.first_death_queue).into_owned(),
            output::safe(g.reason()).into_owned(),
            g.messages.to_string(),
            time(g.oldest),
            time(g.newest),
        ]);
    }
    table.to_string()
}

/// A vhost name from the command line: the same rules as in a spec.
pub fn vhost_name(value: &str) -> Result<String, String> {
    match spec::vhost_problem(value) {
        Some(problem) => Err(problem),
        None => Ok(value.to_string()),
    }
}

/// How to reach the broker. Each flag has an environment variable; a context of the config file
/// (`--context`) fills in what neither says. The environment is read in `crate::config`, not by
/// clap, so that `hopper config show` can say where each setting came from; each flag's help is
/// its `config::Setting`'s.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerArgs {
    #[arg(long, help_heading = "Broker", value_name = "NAME", help = Setting::Context.help())]
    pub context: Option<String>,
    #[arg(long, help_heading = "Broker", value_name = "URL", help = Setting::AmqpUrl.help())]
    pub amqp_url: Option<String>,
    #[arg(long, help_heading = "Broker", value_name = "URL", help = Setting::ManagementUrl.help())]
    pub management_url: Option<String>,
    #[arg(long, help_heading = "Broker", value_name = "USER", help = Setting::Username.help())]
    pub username: Option<String>,
    #[arg(long, help_heading = "Broker", value_name = "FILE", help = Setting::PasswordFile.help())]
    pub password_file: Option<PathBuf>,
    #[arg(long, help_heading = "Broker", value_name = "FILE", help = Setting::TlsCaCertFile.help())]
    pub tls_ca_cert_file: Option<PathBuf>,
    #[arg(long, help_heading = "Broker", value_name = "FILE", requires = "tls_key_file", help = Setting::TlsCertFile.help())]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, help_heading = "Broker", value_name = "FILE", requires = "tls_cert_file", help = Setting::TlsKeyFile.help())]
    pub tls_key_file: Option<PathBuf>,
    #[arg(long, help_heading = "Broker", value_name = "DURATION", value_parser = crate::config::parse_timeout, help = Setting::Timeout.help())]
    pub timeout: Option<std::time::Duration>,
}

impl BrokerArgs {
    /// Every setting resolved: flags, then the environment, then the context, then defaults.
    pub fn resolve(&self) -> Result<crate::config::Resolution> {
        let flags = crate::config::Flags {
            context: self.context.clone(),
            amqp_url: self.amqp_url.clone(),
            management_url: self.management_url.clone(),
            username: self.username.clone(),
            password_file: self.password_file.clone(),
            tls_ca_cert_file: self.tls_ca_cert_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            timeout: self.timeout,
        };
        crate::config::resolve(&flags, &|name| std::env::var(name).ok())
    }

    /// The endpoint the settings name; a context's vhost that is not the one the AMQP URL names
    /// is refused.
    pub fn endpoint(&self) -> Result<Endpoint> {
        let resolution = self.resolve()?;
        let endpoint = Endpoint::from_settings(resolution.settings()?)?;
        resolution.check_vhost(&endpoint)?;
        Ok(endpoint)
    }

    /// The vhost for a command that takes it from the command line: `--vhost`, else the AMQP
    /// URL's, else the context's, else `/`. Two of them naming different vhosts is refused.
    pub fn vhost(&self, flag: Option<&str>, endpoint: &Endpoint) -> Result<String> {
        if let spec::Vhosts::Override(v) | spec::Vhosts::OfTheUrl(v) = vhosts(flag, Some(endpoint))? {
            return Ok(v.to_string());
        }
        match self.resolve()?.vhost {
            Some(v) => vhost_name(&v.value).map_err(|e| anyhow::anyhow!("the context's vhost: {e}")),
            None => Ok("/".into()),
        }
    }
}

pub fn run(cli: Cli) -> Result<Exit> {
    output::set_verbosity(cli.verbosity());
    let (formats, prints) = cli.command.formats();
    if cli.format_given && !formats.contains(&cli.format) {
        bail!("`hopper {}` cannot print --format {}: {prints}; drop --format", cli.command.name(), cli.format.as_str());
    }
    match cli.command {
        Command::Apply(args) => apply::run(args, cli.format),
        Command::Compile(args) => compile::run(args, cli.format),
        Command::Config(command) => config::run(command, cli.format),
        Command::Contract(args) => contract::run(args, cli.format),
        Command::Diff(args) => diff::run(args, cli.format),
        Command::Export(args) => export::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Inspect(args) => inspect::run(args, cli.format),
        Command::Lint(args) => lint::run(args, cli.format),
        Command::Redrive(args) => redrive::run(args, cli.format),
        Command::Schedule(args) => schedule::run(args, cli.format),
        Command::Schema(args) => schema::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
    }
}
