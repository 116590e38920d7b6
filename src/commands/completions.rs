//! `hopper completions SHELL`: a completion script, generated from the same definition of the
//! command line that parses it, so it never falls behind.

use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::Exit;

/// Print a shell completion script.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper completions bash > ~/.local/share/bash-completion/completions/hopper
  hopper completions zsh > ~/.zfunc/_hopper          (with fpath+=~/.zfunc before compinit)
  hopper completions fish > ~/.config/fish/completions/hopper.fish
  hopper completions powershell >> $PROFILE")]
pub struct Args {
    /// The shell: bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: Args) -> Result<Exit> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut super::Cli::command(), "hopper", &mut script);
    crate::output::data(&String::from_utf8(script)?)?;
    Ok(Exit::Ok)
}
