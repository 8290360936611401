//! The queue job of `anvil auto`: one session of a run (`auto_session`), on the same database
//! as eval trials but on its own apalis queue, so the trial jobs' type and their queued rows are
//! untouched. One worker process serves both ([`crate::jobs::worker::run_with`]).
//!
//! A session's job is pushed once (idempotency key: run and session); its attempt is apalis's
//! attempt count, as for trials: an infrastructure failure returns an error that apalis
//! delivers again as the next attempt, and a lost worker's job is re-queued with one more.

use apalis::prelude::{TaskBuilder, TaskSink};
use futures::stream;
use serde::{Deserialize, Serialize};

use crate::auto::run_state::SessionKind;
use crate::jobs::queue::{Db, QueueError, jobs_table, on_pool};

/// The apalis queue auto sessions travel on.
pub const AUTO_QUEUE_NAME: &str = "anvil.auto_session.v1";

/// Deliveries of one session at most (infrastructure retries and lost workers); the run's
/// ledger ends the run far earlier ([`crate::auto::run_state::Limits::infra_retries`]).
pub const MAX_ATTEMPTS: u32 = 20;

/// Runs `$body` with `$storage` the apalis storage of auto sessions on the pool `$db` holds.
macro_rules! on_auto_storage {
    ($db:expr, $pool:ident, $storage:ident, $config:ident => $body:expr) => {
        match $db {
            $crate::jobs::queue::Db::Sqlite($pool) => {
                type $storage = apalis_sqlite::SqliteStorage<$crate::auto::job::AutoSessionJob>;
                let $config =
                    apalis_sqlite::Config::default().queue($crate::auto::job::AUTO_QUEUE_NAME);
                $body
            }
            $crate::jobs::queue::Db::Postgres($pool) => {
                type $storage = apalis_postgres::PostgresStorage<$crate::auto::job::AutoSessionJob>;
                let $config =
                    apalis_postgres::Config::default().queue($crate::auto::job::AUTO_QUEUE_NAME);
                $body
            }
        }
    };
}
pub(crate) use on_auto_storage;

/// One session of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoSessionJob {
    pub run: String,
    pub session: u32,
    pub kind: SessionKind,
}

impl AutoSessionJob {
    fn idempotency_key(&self) -> String {
        format!("{}\u{1f}{}", self.run, self.session)
    }
}

/// Pushes `job` unless it was pushed before.
pub async fn enqueue(db: &Db, job: &AutoSessionJob) -> Result<(), QueueError> {
    let key = job.idempotency_key();
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {} WHERE job_type = $1 AND idempotency_key = $2",
        jobs_table(db)
    ));
    let n: i64 = on_pool!(db, pool => sqlx::query_scalar(sql)
        .bind(AUTO_QUEUE_NAME)
        .bind(&key)
        .fetch_one(pool)
        .await)
    .map_err(QueueError::sql("reading the queued auto sessions"))?;
    if n > 0 {
        return Ok(());
    }
    let task = TaskBuilder::new(job.clone())
        .max_attempts(MAX_ATTEMPTS as usize)
        .idempotency_key(key)
        .build();
    let err = |reason: String| QueueError::Enqueue {
        sweep: job.run.clone(),
        reason,
    };
    on_auto_storage!(db, pool, Storage, config => Storage::new(pool)
        .with_config(config)
        .push_all(&mut stream::iter([task]))
        .await
        .map_err(|e| err(e.to_string())))
}

/// What runs an auto session; the real one is [`crate::auto::orchestrator::Orchestrator`].
#[async_trait::async_trait]
pub trait AutoSessionHandler: Send + Sync + 'static {
    /// Runs delivery `attempt` of `job` (apalis task id `task`) on worker `worker`. An error is
    /// delivered again as the next attempt (the handler has scheduled when, on the queue).
    async fn run(
        &self,
        job: &AutoSessionJob,
        attempt: u32,
        task: &str,
        worker: &str,
    ) -> Result<(), AutoJobError>;
}

/// Why a delivery of an auto session returns an error (apalis delivers it again).
#[derive(Debug, thiserror::Error)]
pub enum AutoJobError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("auto run {run}, session {session}, attempt {attempt}: {reason} (will be retried)")]
    Retry {
        run: String,
        session: u32,
        attempt: u32,
        reason: String,
    },
}
