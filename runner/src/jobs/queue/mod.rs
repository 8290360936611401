//! The durable job queue of eval sweeps.
//!
//! apalis carries the jobs (delivery, locking, attempts, worker heartbeats and orphan recovery)
//! in its own tables; anvil keeps what a sweep means beside them, in tables of its own
//! (`migrations/`): the sweep and its digests, one row per trial holding its state and, once
//! finished, its trial record, and the workers with their heartbeats. Both live in one database:
//! a SQLite file by default, or Postgres when workers span machines.
//!
//! Delivery is at least once; results are exactly once: the trial row is keyed by
//! (sweep, task, model, trial) and every write to it is fenced by the attempt number, so a
//! worker that lost its job (and was presumed dead) cannot overwrite a newer attempt's result.

mod budget;
mod db;
mod history;
pub(crate) mod job;
mod location;
mod store;
mod watch;

pub use budget::{Admission, SweepSpend};
pub use db::Db;
pub(crate) use db::on_pool;
pub use history::{SweepCost, SweepHistory, utc_minute};
pub use job::{QUEUE_NAME, TrialJob, enqueue};
pub(crate) use job::{jobs_table, on_storage, schedule_retry};
pub use location::{DEFAULT_FILE, QueueLocation};
pub use store::{
    Cell, Counts, Liveness, RunningTrial, SweepRow, SweepStart, SweepSummary, TrialKey, TrialState,
    WorkerRow, now_ms,
};
pub use watch::{CHECK_TIMEOUT, DbWatch};

/// What went wrong with the queue, said for the person who must act on it.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("--queue is empty")]
    EmptyLocation,
    #[error("--queue '{given}': only postgres:// URLs and SQLite file paths are supported")]
    UnsupportedScheme { given: String },
    #[error("--queue '{given}': a SQLite queue needs a file path that every worker can open")]
    NoSharedFile { given: String },
    #[error("this system has no data directory for the default queue; pass --queue")]
    NoDataDir,
    #[error("cannot open the queue at {location}: {reason}")]
    Open { location: String, reason: String },
    #[error(
        "there is no queue database at {location} (`anvil-evals run` or `worker` creates it; \
         give --queue to name another)"
    )]
    Missing { location: String },
    #[error(
        "{location} is not a queue database: {reason} (`anvil-evals run` or `worker` makes \
         one; give --queue to name another)"
    )]
    NotAQueue { location: String, reason: String },
    #[error("the queue database at {location} was lost: {reason}")]
    Lost { location: String, reason: String },
    #[error("cannot bring the {what} tables of the queue up to date: {reason}")]
    Migrate { what: String, reason: String },
    #[error("queue database: {context}: {source}")]
    Sql {
        context: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("sweep {id} vanished while being recorded")]
    SweepVanished { id: String },
    #[error("sweep {id}: no such sweep in this queue (see `anvil-evals status`)")]
    NoSuchSweep { id: String },
    #[error("trial {key}, attempt {attempt}: {reason} (will be retried)")]
    Retry {
        key: String,
        attempt: u32,
        reason: String,
    },
    #[error("enqueueing sweep {sweep}: {reason}")]
    Enqueue { sweep: String, reason: String },
    #[error("trial {key}: its record cannot be stored: {reason}")]
    Record { key: String, reason: String },
}

impl QueueError {
    pub(crate) fn sql(context: impl Into<String>) -> impl FnOnce(sqlx::Error) -> QueueError {
        let context = context.into();
        move |source| QueueError::Sql { context, source }
    }
}
