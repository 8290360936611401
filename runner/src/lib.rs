//! anvil-runner: the `anvil` command (interactive REPL and headless `-p`). The job queue,
//! workspaces and workers of eval sweeps and `anvil auto` join it later.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// The interactive approval prompt.
pub mod approve;
/// The command line.
pub mod cli;
/// The typed contract between a trial's worker and its `anvil -p`.
pub mod contract;
/// Exit codes, one per turn outcome.
pub mod exit;
/// `anvil -p`.
pub mod headless;
/// Log output to a file, never to the terminal.
pub mod logging;
/// The durable job queue of eval sweeps (SQLite or Postgres, through apalis).
pub mod queue;
/// The interactive renderer.
pub mod render;
/// The interactive session.
pub mod repl;
/// Building a session: workspace, config, model, tools, prompt.
pub mod setup;
/// Sweeps: planning, recording, resuming.
pub mod sweep;
/// One eval trial: workspace, agent, grader, record.
pub mod trial;
/// Proving a task sound on workspaces prepared as a trial's are.
pub mod validate;
/// The worker: runs queued trials to recorded results.
pub mod worker;
/// A trial's fresh workspace.
pub mod workspace;
