//! The spec: TOML files describing retry topologies, read with byte spans so that every mistake is
//! reported at its file, line and column before anything reaches a broker.

mod files;
pub mod keys;
mod parse;
mod validate;

use std::path::PathBuf;

pub use crate::diagnostic::{Diagnostic, FileId, Sources, SpecError};
// A validated topology's types live in `topology`, below both `spec` and `compile`: `spec`
// compiles what it validates, and `compile` reads only the types.
pub use crate::topology::duration::{format_duration, parse as parse_duration};
pub use crate::topology::{
    DEFAULT_DELIVERY_LIMIT, DEFAULT_JITTER_BUCKETS, ExchangeType, IdempotencyKey, Jitter, MAX_ATTEMPTS,
    MAX_JITTER_BUCKETS, MAX_TTL_MS, QueueType, Strategy, Topology,
};
pub use files::{Clash, MAX_SPEC_BYTES, STDIN_NAME, Skipped, clash};
pub use validate::vhost_problem;

use crate::compile::CompiledTopology;

/// Every topology of every spec file, validated and compiled. Validation checks the names the
/// compiler generates, so each topology is compiled there, once: compiled again for the command,
/// it was a fifth of loading a spec (callgrind, 500 topologies).
#[derive(Debug, Clone)]
pub struct Spec {
    pub compiled: Vec<CompiledTopology>,
}

impl Spec {
    pub fn topologies(&self) -> impl Iterator<Item = &Topology> {
        self.compiled.iter().map(|c| &c.topology)
    }
}

/// Why a spec could not be loaded.
pub enum LoadError {
    /// A path that cannot be read, or a directory without `*.toml` files.
    Io(String),
    /// Files that were read but are wrong; every problem found, with its position.
    Invalid(SpecError),
}

/// Which vhost each topology is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vhosts<'a> {
    /// Each file's `vhost`, else `/`.
    AsWritten,
    /// Every topology's, whatever its file says (`--vhost`).
    Override(&'a str),
    /// The vhost the AMQP URL names: a topology's whose file names none; a file that names
    /// another is an error.
    OfTheUrl(&'a str),
}

impl<'a> Vhosts<'a> {
    /// The one vhost every topology is in, when it is known before the files are read.
    pub fn one(self) -> Option<&'a str> {
        match self {
            Vhosts::Override(v) | Vhosts::OfTheUrl(v) => Some(v),
            Vhosts::AsWritten => None,
        }
    }
}

impl<'a> From<Option<&'a str>> for Vhosts<'a> {
    /// `--vhost`, if given.
    fn from(flag: Option<&'a str>) -> Self {
        flag.map_or(Vhosts::AsWritten, Vhosts::Override)
    }
}

/// Reads files and directories of `*.toml` (sorted by name) into one validated spec.
pub fn load(paths: &[PathBuf], vhosts: Vhosts<'_>) -> Result<Spec, LoadError> {
    let (sources, _) = read(paths)?;
    from_sources(sources, vhosts).map_err(LoadError::Invalid)
}

/// The files the paths name, read but not yet parsed (a plan file keeps them), and what was not
/// read.
pub fn read(paths: &[PathBuf]) -> Result<(Sources, Vec<Skipped>), LoadError> {
    files::read(paths)
}

/// Parses and validates files already in memory. Pure: the unit tests' entry point.
pub fn from_sources(sources: Sources, vhosts: Vhosts<'_>) -> Result<Spec, SpecError> {
    let mut diagnostics = Vec::new();
    // One topology a file is the usual layout; a Draft is about a kilobyte, so growing the vector
    // by doubling copies megabytes at 10,000 files.
    let mut drafts = Vec::with_capacity(sources.len());
    for file in 0..sources.len() {
        drafts.extend(parse::parse_file(file, sources.text(file), &mut diagnostics));
    }
    let compiled = validate::validate(drafts, vhosts, &sources, &mut diagnostics);
    // A mistake in [defaults] is found once per topology that inherits it; show it once.
    let mut seen = std::collections::BTreeSet::new();
    diagnostics.retain(|d| seen.insert((d.file, d.span.start, d.span.end, d.message.clone())));
    if diagnostics.is_empty() { Ok(Spec { compiled }) } else { Err(SpecError { sources, diagnostics }) }
}

/// The one topology of a test spec; panics with the rendered diagnostics otherwise.
#[cfg(test)]
pub(crate) fn one(toml: &str) -> Topology {
    let spec = from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain()));
    assert_eq!(spec.compiled.len(), 1, "one topology per test spec");
    spec.compiled[0].topology.clone()
}

/// Parses one TOML text, for tests and for `-` style callers.
pub fn from_str(name: &str, text: &str) -> Result<Spec, SpecError> {
    let mut sources = Sources::default();
    sources.add(PathBuf::from(name), text.to_string());
    from_sources(sources, Vhosts::AsWritten)
}
