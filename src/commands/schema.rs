//! `hopper schema`: the JSON Schema of the spec file, for editors (taplo, Even Better TOML).

use anyhow::Result;

use crate::Exit;

/// The JSON Schema of a spec file. The file is in the repository (`schema/hopper-spec.schema.json`);
/// a test checks every example spec against it, and that it refuses a misspelt key.
pub const SPEC_SCHEMA: &str = include_str!("../../schema/hopper-spec.schema.json");

/// Print the JSON Schema of a spec file, for editors.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper schema > hopper.schema.json
  then put `#:schema ./hopper.schema.json` on the first line of a spec file, or point taplo at
  it from .taplo.toml (see docs/spec.md)")]
pub struct Args {}

pub fn run(_args: Args) -> Result<Exit> {
    crate::output::data(SPEC_SCHEMA)?;
    Ok(Exit::Ok)
}
