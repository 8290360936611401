//! The job apalis carries: one trial of a sweep. Its queue name is fixed here (never the Rust
//! type name, so renaming the type cannot orphan queued jobs), and so is its attempt limit.

use std::time::Duration;

use apalis::prelude::{TaskBuilder, TaskSink};
use futures::stream;
use serde::{Deserialize, Serialize};

use super::{Db, QueueError, TrialKey, on_pool};

/// The apalis queue that eval trials travel on.
pub const QUEUE_NAME: &str = "anvil.trial.v1";

/// Runs `$body` with `$storage` bound to the apalis storage type of the pool `$db` holds
/// (`SqliteStorage<TrialJob>` or `PostgresStorage<TrialJob>`), `$pool` to the pool and
/// `$config` to that storage's config, already on [`QUEUE_NAME`]. The two storages share
/// their method names but not a trait that covers building workers, hence a macro.
macro_rules! on_storage {
    ($db:expr, $pool:ident, $storage:ident, $config:ident => $body:expr) => {
        match $db {
            $crate::jobs::queue::Db::Sqlite($pool) => {
                type $storage = apalis_sqlite::SqliteStorage<$crate::jobs::queue::TrialJob>;
                let $config =
                    apalis_sqlite::Config::default().queue($crate::jobs::queue::QUEUE_NAME);
                $body
            }
            $crate::jobs::queue::Db::Postgres($pool) => {
                type $storage = apalis_postgres::PostgresStorage<$crate::jobs::queue::TrialJob>;
                let $config =
                    apalis_postgres::Config::default().queue($crate::jobs::queue::QUEUE_NAME);
                $body
            }
        }
    };
}
pub(crate) use on_storage;

/// apalis's jobs table in `db`.
pub(crate) fn jobs_table(db: &Db) -> &'static str {
    match db {
        Db::Sqlite(_) => "Jobs",
        Db::Postgres(_) => "apalis.jobs",
    }
}

/// One (task, model, variant, trial) of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialJob {
    pub sweep: String,
    pub task: String,
    pub model: String,
    /// The harness variant; absent in sweeps without variants (and in jobs queued before
    /// there were any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub trial: u32,
    /// The sweep's attempt limit (infrastructure retries included).
    pub max_attempts: u32,
}

impl TrialJob {
    pub fn key(&self) -> TrialKey {
        TrialKey {
            sweep: self.sweep.clone(),
            task: self.task.clone(),
            model: self.model.clone(),
            variant: self.variant.clone(),
            trial: self.trial,
        }
    }

    /// Drops duplicate pushes of the same trial (a resumed `run` pushes every unfinished one).
    /// Without a variant it is what it was before there were variants (jobs already queued
    /// keep theirs).
    fn idempotency_key(&self) -> String {
        match &self.variant {
            None => format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{}",
                self.sweep, self.task, self.model, self.trial
            ),
            Some(variant) => format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{variant}\u{1f}{}",
                self.sweep, self.task, self.model, self.trial
            ),
        }
    }
}

impl TrialJob {
    pub fn new(key: &TrialKey, max_attempts: u32) -> Self {
        TrialJob {
            sweep: key.sweep.clone(),
            task: key.task.clone(),
            model: key.model.clone(),
            variant: key.variant.clone(),
            trial: key.trial,
            max_attempts,
        }
    }
}

/// The idempotency keys of the trial jobs of `sweep` already pushed.
async fn existing_keys(
    db: &Db,
    sweep: &str,
) -> Result<std::collections::HashSet<String>, QueueError> {
    let prefix = format!("{sweep}\u{1f}");
    let chars = prefix.chars().count() as i32;
    // The table name is one of two constants, never input.
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT idempotency_key FROM {} WHERE job_type = $1 AND substr(idempotency_key, 1, $3) = $2",
        jobs_table(db)
    ));
    let keys: Vec<Option<String>> = on_pool!(db, pool => sqlx::query_scalar(sql)
        .bind(QUEUE_NAME)
        .bind(&prefix)
        .bind(chars)
        .fetch_all(pool)
        .await)
    .map_err(QueueError::sql("reading the queued jobs"))?;
    Ok(keys.into_iter().flatten().collect())
}

/// Pushes one job per key. `max_attempts` is the only retry limit: the worker's handler turns
/// an infrastructure failure into an error that apalis retries, up to this many attempts.
///
/// Keys whose job is already in the queue are skipped (a resumed `run` pushes every unfinished
/// trial; the idempotency key would refuse a duplicate anyway, on Postgres with an error).
pub async fn enqueue(db: &Db, keys: &[TrialKey], max_attempts: u32) -> Result<(), QueueError> {
    let sweep = keys.first().map(|k| k.sweep.clone()).unwrap_or_default();
    let existing = existing_keys(db, &sweep).await?;
    let tasks = keys.iter().filter_map(|key| {
        let job = TrialJob::new(key, max_attempts);
        let idempotency = job.idempotency_key();
        if existing.contains(&idempotency) {
            return None;
        }
        Some(
            TaskBuilder::new(job)
                .max_attempts(max_attempts as usize)
                .idempotency_key(idempotency)
                .build(),
        )
    });
    let err = |e: String| QueueError::Enqueue {
        sweep: sweep.clone(),
        reason: e,
    };
    on_storage!(db, pool, Storage, config => Storage::new(pool)
        .with_config(config)
        .push_all(&mut stream::iter(tasks))
        .await
        .map_err(|e| err(e.to_string())))
}

/// Takes the waiting trial jobs of `sweep` (pending, or failed with attempts left) off the queue:
/// marked `Killed`, so no worker fetches them. For a cancelled sweep, whose trials are
/// `cancelled` already (a worker would only acknowledge them). Jobs a worker holds are left to
/// it: it sees the sweep cancelled and records the trial so.
pub(crate) async fn kill_waiting(db: &Db, sweep: &str) -> Result<u64, QueueError> {
    let prefix = format!("{sweep}\u{1f}");
    let chars = prefix.chars().count() as i32;
    let done_at = match db {
        Db::Sqlite(_) => "strftime('%s', 'now')",
        Db::Postgres(_) => "now()",
    };
    // The table name and the time expression are constants, never input.
    let sql = sqlx::AssertSqlSafe(format!(
        "UPDATE {} SET status = 'Killed', done_at = {done_at} \
         WHERE job_type = $1 AND substr(idempotency_key, 1, $3) = $2 \
         AND (status = 'Pending' OR (status = 'Failed' AND attempts < max_attempts))",
        jobs_table(db)
    ));
    on_pool!(db, pool => sqlx::query(sql)
        .bind(QUEUE_NAME)
        .bind(&prefix)
        .bind(chars)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))
    .map_err(QueueError::sql(format!(
        "taking the jobs of cancelled sweep {sweep} off the queue"
    )))
}

/// Moves the `run_at` of job `task`, still locked by `worker`, `wait` into the future: apalis
/// fetches a failed job again only once its `run_at` has passed, so a retry scheduled here
/// waits on the queue instead of in a worker slot. Call it before the handler returns the
/// error (apalis's acknowledgement leaves `run_at` alone). SQLite's `run_at` is in whole
/// seconds of the workers' clock, so the wait is rounded up to the next second there;
/// Postgres compares with its own `now()`, to the microsecond.
pub(crate) async fn schedule_retry(
    db: &Db,
    task: &str,
    worker: &str,
    wait: Duration,
) -> Result<(), QueueError> {
    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
    let context = format!("scheduling the retry of job {task}");
    match db {
        Db::Sqlite(pool) => {
            let run_at = (super::now_ms().saturating_add(wait_ms) + 999) / 1000;
            sqlx::query("UPDATE Jobs SET run_at = $1 WHERE id = $2 AND lock_by = $3")
                .bind(run_at)
                .bind(task)
                .bind(worker)
                .execute(pool)
                .await
                .map_err(QueueError::sql(context))?;
        }
        Db::Postgres(pool) => {
            sqlx::query(
                "UPDATE apalis.jobs SET run_at = now() + $1::bigint * interval '1 millisecond' \
                 WHERE id = $2 AND lock_by = $3",
            )
            .bind(wait_ms)
            .bind(task)
            .bind(worker)
            .execute(pool)
            .await
            .map_err(QueueError::sql(context))?;
        }
    }
    Ok(())
}
