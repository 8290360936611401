//! The job side: the durable queue, and what runs on it. A sweep is planned into trial jobs
//! ([`sweep`]); a worker ([`worker`]) claims them and runs each ([`trial`]) in a fresh
//! workspace ([`workspace`]) with a child `anvil -p` and the grader, keeping the agent's
//! session in the sweep's artifact directory ([`transcripts`]); [`validate`] proves a task
//! sound on workspaces prepared exactly as a trial's are.

/// The one way a queued job runs the agent: a child `anvil -p`.
pub mod child;
/// Directories only this user can change (workspaces, transcripts).
pub mod private_dir;
/// The durable job queue (SQLite or Postgres, through apalis).
pub mod queue;
/// Sweeps: planning, recording, resuming.
pub mod sweep;
/// Sweep files (`anvil-evals run --file`): a sweep's settings in TOML.
pub mod sweep_file;
/// Where a sweep's trials keep their transcripts.
pub mod transcripts;
/// One eval trial: workspace, agent, grader, record.
pub mod trial;
/// Proving a task sound on workspaces prepared as a trial's are.
pub mod validate;
/// Variants: named agent configurations, a sweep dimension.
pub mod variant;
/// The worker: runs queued trials to recorded results.
pub mod worker;
/// A trial's fresh workspace.
pub mod workspace;
