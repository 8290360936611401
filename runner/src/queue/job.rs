//! The job apalis carries: one trial of a sweep. Its queue name is fixed here (never the Rust
//! type name, so renaming the type cannot orphan queued jobs), and so is its attempt limit.

use apalis::prelude::{TaskBuilder, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use futures::stream;
use serde::{Deserialize, Serialize};

use super::{Db, QueueError, TrialKey};

/// The apalis queue that eval trials travel on.
pub const QUEUE_NAME: &str = "anvil.trial.v1";

/// One (task, model, trial) of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialJob {
    pub sweep: String,
    pub task: String,
    pub model: String,
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
            trial: self.trial,
        }
    }

    /// Drops duplicate pushes of the same trial (a resumed `run` pushes every unfinished one).
    fn idempotency_key(&self) -> String {
        format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{}",
            self.sweep, self.task, self.model, self.trial
        )
    }
}

impl TrialJob {
    pub fn new(key: &TrialKey, max_attempts: u32) -> Self {
        TrialJob {
            sweep: key.sweep.clone(),
            task: key.task.clone(),
            model: key.model.clone(),
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
    let rows: Vec<(Option<String>,)> = match db {
        Db::Sqlite(pool) => {
            sqlx::query_as(
                "SELECT idempotency_key FROM Jobs WHERE job_type = $1 \
                 AND substr(idempotency_key, 1, $3) = $2",
            )
            .bind(QUEUE_NAME)
            .bind(&prefix)
            .bind(chars)
            .fetch_all(pool)
            .await
        }
        Db::Postgres(pool) => {
            sqlx::query_as(
                "SELECT idempotency_key FROM apalis.jobs WHERE job_type = $1 \
                 AND substr(idempotency_key, 1, $3) = $2",
            )
            .bind(QUEUE_NAME)
            .bind(&prefix)
            .bind(chars)
            .fetch_all(pool)
            .await
        }
    }
    .map_err(QueueError::sql("reading the queued jobs"))?;
    Ok(rows.into_iter().filter_map(|(k,)| k).collect())
}

pub(crate) fn sqlite_config() -> apalis_sqlite::Config {
    apalis_sqlite::Config::default().queue(QUEUE_NAME)
}

pub(crate) fn postgres_config() -> apalis_postgres::Config {
    apalis_postgres::Config::default().queue(QUEUE_NAME)
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
    match db {
        Db::Sqlite(pool) => {
            let mut storage = SqliteStorage::<TrialJob>::new(pool).with_config(sqlite_config());
            storage
                .push_all(&mut stream::iter(tasks))
                .await
                .map_err(|e| err(e.to_string()))
        }
        Db::Postgres(pool) => {
            let mut storage = PostgresStorage::<TrialJob>::new(pool).with_config(postgres_config());
            storage
                .push_all(&mut stream::iter(tasks))
                .await
                .map_err(|e| err(e.to_string()))
        }
    }
}
