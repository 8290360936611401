//! `anvil-evals workspaces`: the workspaces `--keep-workspaces` kept, listed or removed.

use std::path::PathBuf;
use std::process::ExitCode;

use anvil_runner::jobs::workspace::Workspaces;
use anyhow::Result;

#[derive(Debug, clap::Subcommand)]
pub enum WorkspacesCommand {
    /// Print the path of every kept workspace, one per line.
    List(WorkspacesArgs),
    /// Remove every kept workspace (running trials' workspaces and templates stay).
    Clean(WorkspacesArgs),
}

#[derive(Debug, clap::Args)]
pub struct WorkspacesArgs {
    /// The --workspaces directory that `run` or `worker` was given (default: theirs,
    /// anvil-trials in the system temp dir).
    #[arg(long)]
    pub workspaces: Option<PathBuf>,
}

impl WorkspacesArgs {
    fn dir(&self) -> PathBuf {
        self.workspaces
            .clone()
            .unwrap_or_else(crate::sweeps::default_workspaces)
    }
}

pub fn run(command: WorkspacesCommand) -> Result<ExitCode> {
    match command {
        WorkspacesCommand::List(args) => {
            let dir = args.dir();
            let kept = Workspaces::new(&dir).kept()?;
            for path in &kept {
                out!("{}", path.display());
            }
            eprintln!("{} kept workspaces in {}", kept.len(), dir.display());
        }
        WorkspacesCommand::Clean(args) => {
            let dir = args.dir();
            let removed = Workspaces::new(&dir).remove_kept()?;
            eprintln!("removed {removed} kept workspaces from {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
