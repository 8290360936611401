//! anvil-runner: two programs behind one library.
//!
//! - [`cli`]: the `anvil` command — the interactive REPL and headless `anvil -p`, with the
//!   renderer, the approval prompt and session setup.
//! - [`jobs`]: the job side — the durable queue (SQLite or Postgres), a trial's isolated
//!   workspace, the worker, the eval trial job, sweep planning and task validation.
//!
//! What crosses between the two is typed and lives here: [`contract`] (what `anvil -p` prints
//! and a trial reads, and the pinned model configuration a worker hands its child) and [`exit`]
//! (one exit code per turn outcome). Dependency direction: `cli` never imports `jobs`, and
//! `jobs` talks to `anvil -p` only through [`contract`] and [`exit`], as a separate process.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// `anvil auto`: long-running feature loops whose truth the harness owns (being built; the
/// design is in its module doc).
pub mod auto;
/// The `anvil` front end: command line, REPL, headless mode.
pub mod cli;
/// The typed contract between a trial's worker and its `anvil -p`.
pub mod contract;
/// Exit codes, one per turn outcome.
pub mod exit;
/// The job side: queue, workspaces, worker, trials, sweeps.
pub mod jobs;
/// Logs and traces for both binaries: JSON lines in the data directory (never on the
/// terminal), OTLP export when configured.
pub mod telemetry;
