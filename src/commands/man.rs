//! `hopper man`: the manual pages, generated from the definition of the command line.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::CommandFactory;

use crate::Exit;

/// Print the man page of hopper or of one of its commands, or write them all.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper man | man -l -                  read hopper(1)
  hopper man apply | man -l -            read hopper-apply(1)
  hopper man --out-dir /usr/local/share/man/man1   install hopper.1 and hopper-<command>.1")]
pub struct Args {
    /// The command whose page to print [default: hopper itself].
    #[arg(value_name = "COMMAND", conflicts_with = "out_dir")]
    pub command: Option<String>,
    /// Write hopper.1 and hopper-<command>.1 for every command into this directory.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<Exit> {
    // Built, so that each command's page also shows the global options (--format, -q, -v).
    let mut hopper = super::Cli::command();
    hopper.build();
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, page) in pages(&hopper)? {
            let path = dir.join(format!("{name}.1"));
            // Whole or not at all: `man` must never find half a page in /usr/local/share/man.
            crate::output::write_whole(&path, &page).with_context(|| format!("cannot write {}", path.display()))?;
            crate::output::narrate(|| format!("wrote {}", path.display()));
        }
        return Ok(Exit::Ok);
    }
    let wanted = args.command.as_deref();
    let page = match wanted {
        None => render(hopper, "hopper")?,
        Some(name) => {
            let Some(sub) = hopper.find_subcommand(name).cloned() else {
                let names: Vec<_> = hopper.get_subcommands().map(|c| c.get_name().to_string()).collect();
                bail!("hopper has no command `{name}`; its commands are {}", names.join(", "));
            };
            render(page_of(sub), &format!("hopper-{name}"))?
        }
    };
    crate::output::data(&String::from_utf8(page)?)?;
    Ok(Exit::Ok)
}

/// Every page: hopper's, then one per command, by file name (without `.1`).
pub fn pages(hopper: &clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut all = vec![("hopper".to_string(), render(hopper.clone(), "hopper")?)];
    for sub in hopper.get_subcommands().filter(|c| c.get_name() != "help") {
        let name = format!("hopper-{}", sub.get_name());
        all.push((name.clone(), render(page_of(sub.clone()), &name)?));
    }
    Ok(all)
}

/// A command's page is hopper-<command>(1), shows `hopper <command>` in its synopsis, and
/// hopper's version.
fn page_of(sub: clap::Command) -> clap::Command {
    let (name, bin) = (format!("hopper-{}", sub.get_name()), format!("hopper {}", sub.get_name()));
    sub.name(name).bin_name(bin).version(crate::VERSION)
}

fn render(command: clap::Command, title: &str) -> Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command).title(title.to_uppercase()).render(&mut page)?;
    Ok(page)
}
