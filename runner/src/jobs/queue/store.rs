//! anvil's own tables: sweeps, trials (state and result), workers. One portable SQL text per
//! statement, run on SQLite or Postgres alike.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use anvil_report::{FailedAttempt, TrialRecord};
use serde::{Deserialize, Serialize};

use super::{Db, QueueError, on_pool};

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One trial of a sweep: the unique key of its result.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TrialKey {
    pub sweep: String,
    pub task: String,
    pub model: String,
    /// The harness variant (a sweep file's `[variants.NAME]`), `None` in a sweep without
    /// variants. Stored as `''` for none: the column is part of the primary key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub trial: u32,
}

impl TrialKey {
    /// The `variant` column's value: the variant's name, `''` for none.
    pub(crate) fn variant_column(&self) -> &str {
        self.variant.as_deref().unwrap_or("")
    }
}

impl fmt::Display for TrialKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.sweep, self.task, self.model)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        write!(f, "#{}", self.trial)
    }
}

/// Where a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialState {
    Queued,
    Running,
    /// Failed for an infrastructure reason; waiting for its next attempt.
    Retrying,
    /// Graded (pass or fail): the model's result.
    Done,
    /// Could not be completed within the retry limit.
    InfraError,
    Cancelled,
}

impl TrialState {
    pub const ALL: [TrialState; 6] = [
        TrialState::Queued,
        TrialState::Running,
        TrialState::Retrying,
        TrialState::Done,
        TrialState::InfraError,
        TrialState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Queued => "queued",
            TrialState::Running => "running",
            TrialState::Retrying => "retrying",
            TrialState::Done => "done",
            TrialState::InfraError => "infra_error",
            TrialState::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TrialState::Done | TrialState::InfraError | TrialState::Cancelled
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepRow {
    pub id: String,
    pub created_at_ms: i64,
    /// The sweep spec, as JSON.
    pub spec: String,
    pub fingerprint: String,
    pub anvil_git_sha: String,
    pub cancelled: bool,
}

/// What recording a sweep found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepStart {
    Created,
    /// The sweep existed with the same fingerprint.
    Resumed,
    /// The sweep existed with another fingerprint; here is the stored row.
    Conflict(SweepRow),
}

/// How many trials of a sweep are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub by_state: BTreeMap<TrialState, u64>,
    /// Finished trials that passed.
    pub passed: u64,
    /// Trials (whatever their state) with at least one attempt that failed on infrastructure
    /// and was retried.
    pub retried: u64,
}

impl Counts {
    pub fn get(&self, state: TrialState) -> u64 {
        self.by_state.get(&state).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by_state.values().sum()
    }

    pub fn finished(&self) -> u64 {
        self.by_state
            .iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningTrial {
    pub key: TrialKey,
    pub attempt: u32,
    pub worker: Option<String>,
    pub started_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRow {
    pub name: String,
    pub host: String,
    pub pid: i64,
    pub started_at_ms: i64,
    pub last_heartbeat_ms: i64,
    pub stopped: bool,
    /// How often it beats (`--heartbeat-secs`); `None` for a worker registered before this was
    /// recorded: [`WorkerRow::DEFAULT_HEARTBEAT_MS`].
    pub heartbeat_ms: Option<i64>,
    /// How many beats it may miss before it is presumed dead; `None`: 3.
    pub missed_heartbeats: Option<i64>,
}

/// Where a worker stands, as its heartbeats tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It beat within its allowance of missed heartbeats.
    Alive,
    /// It stopped cleanly (Ctrl-C, SIGTERM, `run` done with its sweep).
    Stopped,
    /// Silent for longer than its missed heartbeats allow: presumed dead. The trials it was
    /// running go back to the queue at a live worker's next heartbeat.
    Dead,
}

impl WorkerRow {
    /// The heartbeat of a worker that did not record its own (the `--heartbeat-secs` default).
    pub const DEFAULT_HEARTBEAT_MS: i64 = 5000;
    /// The missed heartbeats of a worker that did not record its own.
    pub const DEFAULT_MISSED_HEARTBEATS: i64 = 3;

    pub fn heartbeat_ms(&self) -> i64 {
        self.heartbeat_ms
            .filter(|&ms| ms > 0)
            .unwrap_or(Self::DEFAULT_HEARTBEAT_MS)
    }

    pub fn missed_heartbeats(&self) -> i64 {
        self.missed_heartbeats
            .filter(|&n| n > 0)
            .unwrap_or(Self::DEFAULT_MISSED_HEARTBEATS)
    }

    /// The silence after which the worker is presumed dead: its heartbeat times the beats it
    /// may miss (apalis re-queues its jobs past the same point).
    pub fn dead_after_ms(&self) -> i64 {
        self.heartbeat_ms().saturating_mul(self.missed_heartbeats())
    }

    /// Where the worker stands at `now_ms`: dead once its last heartbeat is more than
    /// [`Self::dead_after_ms`] old (three missed heartbeats by default).
    pub fn liveness(&self, now_ms: i64) -> Liveness {
        if self.stopped {
            Liveness::Stopped
        } else if now_ms.saturating_sub(self.last_heartbeat_ms) > self.dead_after_ms() {
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }
}

/// One (task, model, variant) of a sweep: how many trials it has and how they went.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Cell {
    pub task: String,
    pub model: String,
    /// `''` for no variant.
    pub variant: String,
    /// Trial rows, whatever their state.
    pub trials: i64,
    /// Graded trials (done with a verdict).
    pub graded: i64,
    pub passed: i64,
}

/// A sweep in the list of sweeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSummary {
    pub id: String,
    pub created_at_ms: i64,
    pub cancelled: bool,
}

// Rows as the tables hold them (integers as i64, flags as 0/1), read by column name and turned
// into the types above in one place each.

#[derive(sqlx::FromRow)]
struct KeyRow {
    sweep: String,
    task: String,
    model: String,
    variant: String,
    trial: i64,
}

impl From<KeyRow> for TrialKey {
    fn from(row: KeyRow) -> Self {
        TrialKey {
            sweep: row.sweep,
            task: row.task,
            model: row.model,
            variant: Some(row.variant).filter(|v| !v.is_empty()),
            trial: row.trial.max(0) as u32,
        }
    }
}

#[derive(sqlx::FromRow)]
struct SweepDbRow {
    id: String,
    created_at_ms: i64,
    spec: String,
    fingerprint: String,
    anvil_git_sha: String,
    cancelled: i64,
}

impl From<SweepDbRow> for SweepRow {
    fn from(row: SweepDbRow) -> Self {
        SweepRow {
            id: row.id,
            created_at_ms: row.created_at_ms,
            spec: row.spec,
            fingerprint: row.fingerprint,
            anvil_git_sha: row.anvil_git_sha,
            cancelled: row.cancelled != 0,
        }
    }
}

#[derive(sqlx::FromRow)]
struct SweepSummaryRow {
    id: String,
    created_at_ms: i64,
    cancelled: i64,
}

impl From<SweepSummaryRow> for SweepSummary {
    fn from(row: SweepSummaryRow) -> Self {
        SweepSummary {
            id: row.id,
            created_at_ms: row.created_at_ms,
            cancelled: row.cancelled != 0,
        }
    }
}

#[derive(sqlx::FromRow)]
struct StateRow {
    state: String,
    attempt: i64,
}

#[derive(sqlx::FromRow)]
struct CountRow {
    state: String,
    trials: i64,
    passed: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct RunningRow {
    #[sqlx(flatten)]
    key: KeyRow,
    attempt: i64,
    worker: Option<String>,
    started_at_ms: Option<i64>,
}

impl From<RunningRow> for RunningTrial {
    fn from(row: RunningRow) -> Self {
        RunningTrial {
            key: row.key.into(),
            attempt: row.attempt.max(0) as u32,
            worker: row.worker,
            started_at_ms: row.started_at_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
struct WorkerDbRow {
    name: String,
    host: String,
    pid: i64,
    started_at_ms: i64,
    last_heartbeat_ms: i64,
    stopped: i64,
    heartbeat_ms: Option<i64>,
    missed_heartbeats: Option<i64>,
}

impl From<WorkerDbRow> for WorkerRow {
    fn from(row: WorkerDbRow) -> Self {
        WorkerRow {
            name: row.name,
            host: row.host,
            pid: row.pid,
            started_at_ms: row.started_at_ms,
            last_heartbeat_ms: row.last_heartbeat_ms,
            stopped: row.stopped != 0,
            heartbeat_ms: row.heartbeat_ms,
            missed_heartbeats: row.missed_heartbeats,
        }
    }
}

impl Db {
    /// Records a sweep, or finds it already recorded (see [`SweepStart`]).
    pub async fn record_sweep(&self, row: &SweepRow) -> Result<SweepStart, QueueError> {
        const SQL: &str = "INSERT INTO anvil_sweeps (id, created_at_ms, spec, fingerprint, anvil_git_sha, cancelled) \
             VALUES ($1, $2, $3, $4, $5, 0) ON CONFLICT (id) DO NOTHING";
        let inserted = on_pool!(self, pool => sqlx::query(SQL)
            .bind(&row.id)
            .bind(row.created_at_ms)
            .bind(&row.spec)
            .bind(&row.fingerprint)
            .bind(&row.anvil_git_sha)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql("recording the sweep"))?;
        if inserted == 1 {
            return Ok(SweepStart::Created);
        }
        let stored = self
            .sweep(&row.id)
            .await?
            .ok_or_else(|| QueueError::SweepVanished { id: row.id.clone() })?;
        if stored.fingerprint == row.fingerprint {
            Ok(SweepStart::Resumed)
        } else {
            Ok(SweepStart::Conflict(stored))
        }
    }

    pub async fn sweep(&self, id: &str) -> Result<Option<SweepRow>, QueueError> {
        const SQL: &str = "SELECT id, created_at_ms, spec, fingerprint, anvil_git_sha, cancelled \
             FROM anvil_sweeps WHERE id = $1";
        let row: Option<SweepDbRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(id).fetch_optional(pool).await)
                .map_err(QueueError::sql(format!("reading sweep {id}")))?;
        Ok(row.map(SweepRow::from))
    }

    /// Every sweep's row (spec included), oldest first.
    pub async fn sweep_rows(&self) -> Result<Vec<SweepRow>, QueueError> {
        const SQL: &str = "SELECT id, created_at_ms, spec, fingerprint, anvil_git_sha, cancelled \
             FROM anvil_sweeps ORDER BY created_at_ms";
        let rows: Vec<SweepDbRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await)
                .map_err(QueueError::sql("reading every sweep"))?;
        Ok(rows.into_iter().map(SweepRow::from).collect())
    }

    /// Every sweep, newest first.
    pub async fn sweeps(&self) -> Result<Vec<SweepSummary>, QueueError> {
        const SQL: &str =
            "SELECT id, created_at_ms, cancelled FROM anvil_sweeps ORDER BY created_at_ms DESC";
        let rows: Vec<SweepSummaryRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await)
                .map_err(QueueError::sql("listing sweeps"))?;
        Ok(rows.into_iter().map(SweepSummary::from).collect())
    }

    /// Adds trial rows that are not there yet (one transaction).
    pub async fn add_trials(&self, keys: &[TrialKey]) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO anvil_trials (sweep, task, model, variant, trial, state, attempt) \
             VALUES ($1, $2, $3, $4, $5, 'queued', 0) ON CONFLICT (sweep, task, model, variant, trial) DO NOTHING";
        on_pool!(self, pool => {
            let mut tx = pool.begin().await.map_err(QueueError::sql("adding trials"))?;
            for key in keys {
                sqlx::query(SQL)
                    .bind(&key.sweep)
                    .bind(&key.task)
                    .bind(&key.model)
                    .bind(key.variant_column())
                    .bind(i64::from(key.trial))
                    .execute(&mut *tx)
                    .await
                    .map_err(QueueError::sql(format!("adding trial {key}")))?;
            }
            tx.commit().await.map_err(QueueError::sql("adding trials"))
        })
    }

    /// Trials of `sweep` that have not finished.
    pub async fn unfinished_trials(&self, sweep: &str) -> Result<Vec<TrialKey>, QueueError> {
        const SQL: &str = "SELECT sweep, task, model, variant, trial FROM anvil_trials \
             WHERE sweep = $1 AND state IN ('queued', 'running', 'retrying') ORDER BY task, model, variant, trial";
        let rows: Vec<KeyRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_all(pool).await)
                .map_err(QueueError::sql(format!("listing trials of {sweep}")))?;
        Ok(rows.into_iter().map(TrialKey::from).collect())
    }

    /// The state and attempt of one trial.
    pub async fn trial_state(
        &self,
        key: &TrialKey,
    ) -> Result<Option<(TrialState, u32)>, QueueError> {
        const SQL: &str = "SELECT state, attempt FROM anvil_trials \
             WHERE sweep = $1 AND task = $2 AND model = $3 AND variant = $4 AND trial = $5";
        let row: Option<StateRow> = on_pool!(self, pool => sqlx::query_as(SQL)
            .bind(&key.sweep)
            .bind(&key.task)
            .bind(&key.model)
            .bind(key.variant_column())
            .bind(i64::from(key.trial))
            .fetch_optional(pool)
            .await)
        .map_err(QueueError::sql(format!("reading trial {key}")))?;
        Ok(row.and_then(|r| TrialState::parse(&r.state).map(|s| (s, r.attempt.max(0) as u32))))
    }

    /// Takes a trial for `attempt`: only from an unfinished state and only forward (a newer
    /// attempt may take it from an older one, never the reverse). False when it was not taken.
    pub async fn claim(
        &self,
        key: &TrialKey,
        attempt: u32,
        worker: &str,
    ) -> Result<bool, QueueError> {
        const SQL: &str = "UPDATE anvil_trials SET state = 'running', attempt = $6, worker = $7, \
             started_at_ms = $8, finished_at_ms = NULL \
             WHERE sweep = $1 AND task = $2 AND model = $3 AND variant = $4 AND trial = $5 \
             AND state IN ('queued', 'running', 'retrying') AND attempt < $6";
        let n = on_pool!(self, pool => sqlx::query(SQL)
            .bind(&key.sweep)
            .bind(&key.task)
            .bind(&key.model)
            .bind(key.variant_column())
            .bind(i64::from(key.trial))
            .bind(i64::from(attempt))
            .bind(worker)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql(format!("claiming trial {key}")))?;
        Ok(n == 1)
    }

    /// Writes the outcome of `attempt`: the result row is upserted under its unique key, and
    /// only if no newer attempt has claimed the trial since. False when fenced off. The record
    /// is stored as its JSON line, with its verdict in the `pass` column beside it.
    pub async fn finish(
        &self,
        key: &TrialKey,
        attempt: u32,
        state: TrialState,
        record: Option<&TrialRecord>,
        error: Option<&str>,
    ) -> Result<bool, QueueError> {
        const SQL: &str = "INSERT INTO anvil_trials \
             (sweep, task, model, variant, trial, state, attempt, finished_at_ms, last_error, record, pass) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (sweep, task, model, variant, trial) DO UPDATE SET \
             state = excluded.state, attempt = excluded.attempt, finished_at_ms = excluded.finished_at_ms, \
             last_error = excluded.last_error, record = COALESCE(excluded.record, anvil_trials.record), \
             pass = CASE WHEN excluded.record IS NULL THEN anvil_trials.pass ELSE excluded.pass END \
             WHERE anvil_trials.attempt <= excluded.attempt \
             AND anvil_trials.state NOT IN ('done', 'infra_error', 'cancelled')";
        let text =
            record
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| QueueError::Record {
                    key: key.to_string(),
                    reason: e.to_string(),
                })?;
        let pass = record.and_then(TrialRecord::counted_pass).map(i64::from);
        let n = on_pool!(self, pool => sqlx::query(SQL)
            .bind(&key.sweep)
            .bind(&key.task)
            .bind(&key.model)
            .bind(key.variant_column())
            .bind(i64::from(key.trial))
            .bind(state.as_str())
            .bind(i64::from(attempt))
            .bind(now_ms())
            .bind(error)
            .bind(text.as_deref())
            .bind(pass)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql(format!(
            "recording the result of trial {key}"
        )))?;
        Ok(n == 1)
    }

    /// Keeps the error of `attempt` of the trial, an infrastructure failure about to be
    /// retried, for the trial's final record ([`Db::earlier_attempts`]).
    pub async fn record_attempt_error(
        &self,
        key: &TrialKey,
        attempt: u32,
        error: &str,
    ) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO anvil_trial_attempts \
             (sweep, task, model, variant, trial, attempt, error, finished_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (sweep, task, model, variant, trial, attempt) DO UPDATE SET \
             error = excluded.error, finished_at_ms = excluded.finished_at_ms";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(&key.sweep)
            .bind(&key.task)
            .bind(&key.model)
            .bind(key.variant_column())
            .bind(i64::from(key.trial))
            .bind(i64::from(attempt))
            .bind(error)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!(
            "recording the error of attempt {attempt} of trial {key}"
        )))?;
        Ok(())
    }

    /// The attempts of the trial before `attempt`, in order, each with the error it ended with;
    /// an attempt that left none (its worker stopped or was lost mid-trial) says so.
    pub async fn earlier_attempts(
        &self,
        key: &TrialKey,
        attempt: u32,
    ) -> Result<Vec<FailedAttempt>, QueueError> {
        const SQL: &str = "SELECT attempt, error FROM anvil_trial_attempts \
             WHERE sweep = $1 AND task = $2 AND model = $3 AND variant = $4 AND trial = $5 \
             AND attempt < $6 ORDER BY attempt";
        if attempt <= 1 {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, String)> = on_pool!(self, pool => sqlx::query_as(SQL)
            .bind(&key.sweep)
            .bind(&key.task)
            .bind(&key.model)
            .bind(key.variant_column())
            .bind(i64::from(key.trial))
            .bind(i64::from(attempt))
            .fetch_all(pool)
            .await)
        .map_err(QueueError::sql(format!(
            "reading the earlier attempts of trial {key}"
        )))?;
        Ok((1..attempt)
            .map(|n| FailedAttempt {
                attempt: n,
                error: rows
                    .iter()
                    .find(|(a, _)| *a == i64::from(n))
                    .map(|(_, e)| e.clone())
                    .unwrap_or_else(|| {
                        "no result recorded: the worker running it stopped or was lost".into()
                    }),
            })
            .collect())
    }

    /// Marks every unfinished trial of `sweep` cancelled and the sweep itself, so that workers
    /// end its running trials, and takes its waiting jobs off the queue (`Killed` in apalis's
    /// table: no worker fetches them, and "jobs waiting" agrees with the trial states). Returns
    /// how many trials it stopped.
    pub async fn cancel_sweep(&self, sweep: &str) -> Result<u64, QueueError> {
        const MARK: &str = "UPDATE anvil_sweeps SET cancelled = 1 WHERE id = $1";
        const TRIALS: &str = "UPDATE anvil_trials SET state = 'cancelled', finished_at_ms = $2 \
             WHERE sweep = $1 AND state IN ('queued', 'running', 'retrying')";
        let found = on_pool!(self, pool => sqlx::query(MARK).bind(sweep).execute(pool).await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql(format!("cancelling {sweep}")))?;
        if found == 0 {
            return Err(QueueError::NoSuchSweep { id: sweep.into() });
        }
        let stopped = on_pool!(self, pool => sqlx::query(TRIALS).bind(sweep).bind(now_ms()).execute(pool).await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql(format!("cancelling the trials of {sweep}")))?;
        super::job::kill_waiting(self, sweep).await?;
        Ok(stopped)
    }

    /// Whether `sweep` was cancelled (asked per job and every second per running trial, so it
    /// reads the one column, not the sweep's spec).
    pub async fn is_cancelled(&self, sweep: &str) -> Result<bool, QueueError> {
        const SQL: &str = "SELECT cancelled FROM anvil_sweeps WHERE id = $1";
        let cancelled: Option<i64> =
            on_pool!(self, pool => sqlx::query_scalar(SQL).bind(sweep).fetch_optional(pool).await)
                .map_err(QueueError::sql(format!("reading sweep {sweep}")))?;
        Ok(cancelled.is_some_and(|c| c != 0))
    }

    pub async fn counts(&self, sweep: &str) -> Result<Counts, QueueError> {
        const SQL: &str = "SELECT state, COUNT(*) AS trials, \
             SUM(CASE WHEN pass = 1 THEN 1 ELSE 0 END) AS passed \
             FROM anvil_trials WHERE sweep = $1 GROUP BY state";
        let rows: Vec<CountRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_all(pool).await)
                .map_err(QueueError::sql(format!("counting trials of {sweep}")))?;
        let mut counts = Counts::default();
        for row in rows {
            if let Some(state) = TrialState::parse(&row.state) {
                counts.by_state.insert(state, row.trials.max(0) as u64);
            }
            counts.passed += row.passed.unwrap_or(0).max(0) as u64;
        }
        const RETRIED: &str = "SELECT COUNT(*) FROM (SELECT DISTINCT task, model, variant, trial \
             FROM anvil_trial_attempts WHERE sweep = $1) AS retried";
        let retried: i64 =
            on_pool!(self, pool => sqlx::query_scalar(RETRIED).bind(sweep).fetch_one(pool).await)
                .map_err(QueueError::sql(format!(
                "counting retried trials of {sweep}"
            )))?;
        counts.retried = retried.max(0) as u64;
        Ok(counts)
    }

    /// Every (task, model, variant) of `sweep` with its trial counts, in key order.
    pub async fn cells(&self, sweep: &str) -> Result<Vec<Cell>, QueueError> {
        const SQL: &str = "SELECT task, model, variant, COUNT(*) AS trials, \
             SUM(CASE WHEN state = 'done' AND pass IS NOT NULL THEN 1 ELSE 0 END) AS graded, \
             SUM(CASE WHEN pass = 1 THEN 1 ELSE 0 END) AS passed \
             FROM anvil_trials WHERE sweep = $1 GROUP BY task, model, variant \
             ORDER BY task, model, variant";
        on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_all(pool).await).map_err(
            QueueError::sql(format!("counting the trials of {sweep} by task")),
        )
    }

    /// The trial records of a sweep (finished trials: graded or infra errors), in key order.
    pub async fn records(&self, sweep: &str) -> Result<Vec<String>, QueueError> {
        const SQL: &str = "SELECT record FROM anvil_trials \
             WHERE sweep = $1 AND state IN ('done', 'infra_error') AND record IS NOT NULL \
             ORDER BY task, model, variant, trial";
        on_pool!(self, pool => sqlx::query_scalar(SQL).bind(sweep).fetch_all(pool).await)
            .map_err(QueueError::sql(format!("reading the results of {sweep}")))
    }

    /// When each finished trial of `sweep` (graded or an infrastructure failure: not cancelled)
    /// ran, as (started, finished) in unix milliseconds: its last attempt's claim to its
    /// result. What `status` measures a sweep's pace with.
    pub async fn finished_spans(&self, sweep: &str) -> Result<Vec<(i64, i64)>, QueueError> {
        const SQL: &str = "SELECT started_at_ms, finished_at_ms FROM anvil_trials \
             WHERE sweep = $1 AND state IN ('done', 'infra_error') \
             AND started_at_ms IS NOT NULL AND finished_at_ms IS NOT NULL";
        on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_all(pool).await).map_err(
            QueueError::sql(format!("reading when the trials of {sweep} ran")),
        )
    }

    /// Trials being run now, in `sweep` or in every sweep.
    pub async fn running(&self, sweep: Option<&str>) -> Result<Vec<RunningTrial>, QueueError> {
        const SQL: &str = "SELECT sweep, task, model, variant, trial, attempt, worker, started_at_ms \
             FROM anvil_trials WHERE state = 'running' AND ($1 IS NULL OR sweep = $1) \
             ORDER BY started_at_ms";
        let rows: Vec<RunningRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_all(pool).await)
                .map_err(QueueError::sql("listing running trials"))?;
        Ok(rows.into_iter().map(RunningTrial::from).collect())
    }

    pub async fn register_worker(&self, w: &WorkerRow) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO anvil_workers (name, host, pid, started_at_ms, last_heartbeat_ms, stopped, \
             heartbeat_ms, missed_heartbeats) \
             VALUES ($1, $2, $3, $4, $5, 0, $6, $7) ON CONFLICT (name) DO UPDATE SET \
             last_heartbeat_ms = excluded.last_heartbeat_ms, stopped = 0, \
             heartbeat_ms = excluded.heartbeat_ms, missed_heartbeats = excluded.missed_heartbeats";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(&w.name)
            .bind(&w.host)
            .bind(w.pid)
            .bind(w.started_at_ms)
            .bind(w.last_heartbeat_ms)
            .bind(w.heartbeat_ms)
            .bind(w.missed_heartbeats)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("registering worker {}", w.name)))
    }

    pub async fn worker_heartbeat(&self, name: &str, stopped: bool) -> Result<(), QueueError> {
        const SQL: &str =
            "UPDATE anvil_workers SET last_heartbeat_ms = $2, stopped = $3 WHERE name = $1";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(name)
            .bind(now_ms())
            .bind(i64::from(stopped))
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("heartbeat of worker {name}")))
    }

    /// Workers seen since `since_ms`, most recent first.
    pub async fn workers(&self, since_ms: i64) -> Result<Vec<WorkerRow>, QueueError> {
        const SQL: &str = "SELECT name, host, pid, started_at_ms, last_heartbeat_ms, stopped, \
             heartbeat_ms, missed_heartbeats \
             FROM anvil_workers WHERE last_heartbeat_ms >= $1 ORDER BY last_heartbeat_ms DESC";
        let rows: Vec<WorkerDbRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(since_ms).fetch_all(pool).await)
                .map_err(QueueError::sql("listing workers"))?;
        Ok(rows.into_iter().map(WorkerRow::from).collect())
    }

    /// Trial jobs waiting in the queue (apalis's tables): pending, fetched by a worker but not
    /// started, or failed with attempts left — never those of a cancelled sweep (a worker would
    /// only acknowledge them; `cancel` takes them off the queue, and a dead worker's re-queued
    /// job of a cancelled sweep is not counted either).
    pub async fn queue_depth(&self) -> Result<u64, QueueError> {
        // The table name is one of two constants, never input. A job's idempotency key starts
        // with its sweep's id and the unit separator (`TrialJob::idempotency_key`).
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {} j WHERE j.job_type = $1 AND (j.status IN ('Pending', 'Queued') \
             OR (j.status = 'Failed' AND j.attempts < j.max_attempts)) \
             AND NOT EXISTS (SELECT 1 FROM anvil_sweeps s WHERE s.cancelled = 1 \
             AND substr(j.idempotency_key, 1, length(s.id) + 1) = s.id || $2)",
            super::jobs_table(self)
        ));
        let n: i64 = on_pool!(self, pool => sqlx::query_scalar(sql)
            .bind(super::QUEUE_NAME)
            .bind("\u{1f}")
            .fetch_one(pool)
            .await)
        .map_err(QueueError::sql("measuring the queue"))?;
        Ok(n.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(last_heartbeat_ms: i64, heartbeat_ms: Option<i64>, stopped: bool) -> WorkerRow {
        WorkerRow {
            name: "w".into(),
            host: "h".into(),
            pid: 1,
            started_at_ms: 0,
            last_heartbeat_ms,
            stopped,
            heartbeat_ms,
            missed_heartbeats: None,
        }
    }

    /// Dead is past three missed heartbeats of the worker's own interval (5 s when it did not
    /// record one), never before; a stopped worker is stopped, however long ago.
    #[test]
    fn a_worker_is_dead_past_three_missed_heartbeats() {
        let w = worker(100_000, Some(2_000), false);
        assert_eq!(w.dead_after_ms(), 6_000);
        assert_eq!(w.liveness(100_000), Liveness::Alive);
        assert_eq!(w.liveness(106_000), Liveness::Alive);
        assert_eq!(w.liveness(106_001), Liveness::Dead);
        let old = worker(100_000, None, false);
        assert_eq!(old.dead_after_ms(), 15_000);
        assert_eq!(old.liveness(115_000), Liveness::Alive);
        assert_eq!(old.liveness(115_001), Liveness::Dead);
        assert_eq!(
            worker(0, Some(1_000), true).liveness(1_000_000),
            Liveness::Stopped
        );
    }
}
