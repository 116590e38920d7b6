//! `hopper export`: the compiled topologies as RabbitMQ definitions JSON, the format of
//! `rabbitmqctl import_definitions` and the management UI's import. Offline.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::output;

/// Print the spec as RabbitMQ definitions (JSON), for `rabbitmqctl import_definitions`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  hopper export topologies/ > definitions.json && rabbitmqctl import_definitions definitions.json"
)]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args) -> Result<Exit> {
    let spec = args.spec.load()?;
    output::json(&crate::definitions::definitions(&spec.compiled))?;
    Ok(Exit::Ok)
}
