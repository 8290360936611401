//! The run's rows in the queue database (`migrations/*/20261215000001_auto.sql`): runs,
//! session attempts (fenced: only a session's newest attempt writes), and the events the
//! harness recorded, among them the ledger's ([`run_state::Event`], kind `ledger`), from
//! which [`run_state::Ledger::replay`] rebuilds the run. One portable SQL text per statement.

use serde::{Deserialize, Serialize};

use crate::auto::run_state::{self, Ledger, Terminal};
use crate::jobs::queue::{Db, QueueError, now_ms, on_pool};

/// A run's state as stored: `running` or a terminal state's name.
pub const RUNNING: &str = "running";

/// One run.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    pub created_at_ms: i64,
    pub repository: String,
    pub spec_path: String,
    pub spec_digest: String,
    pub contract_digest: Option<String>,
    pub accepted_commit: Option<String>,
    pub start_commit: String,
    pub max_sessions: Option<i64>,
    pub max_cost_usd: Option<f64>,
    pub allow_regressions: i64,
    pub max_steps: i64,
    pub session_timeout_s: i64,
    /// The pinned model, as JSON.
    pub model: String,
    pub data_dir: String,
    pub state: String,
    pub terminal_reason: Option<String>,
    pub cancel_requested: i64,
    /// 1 while `anvil auto init` holds the worker sessions (until `run` or `resume`).
    pub hold_workers: i64,
}

impl RunRow {
    /// The terminal state, if the run has one.
    pub fn terminal(&self) -> Option<Terminal> {
        Terminal::ALL.into_iter().find(|t| t.name() == self.state)
    }

    pub fn limits(&self) -> run_state::Limits {
        run_state::Limits {
            max_sessions: self
                .max_sessions
                .map(|n| n.clamp(0, i64::from(u32::MAX)) as u32),
            max_cost_usd: self.max_cost_usd,
            ..run_state::Limits::default()
        }
    }
}

/// One session attempt.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize, Deserialize)]
pub struct SessionRow {
    pub run: String,
    pub session: i64,
    pub attempt: i64,
    pub kind: String,
    pub state: String,
    pub flags: String,
    pub base: Option<String>,
    pub candidate: Option<String>,
    pub merged: Option<String>,
    pub verdict: Option<String>,
    pub verified_delta: Option<String>,
    pub outcome: Option<String>,
    pub cost_usd: Option<f64>,
    pub accounting: Option<String>,
    pub transcript: Option<String>,
    pub worker: Option<String>,
    pub error: Option<String>,
    pub started_at_ms: i64,
    pub ended_at_ms: Option<i64>,
}

/// Session states after which an attempt writes nothing more.
pub const ENDED: [&str; 8] = [
    "merged",
    "not_merged",
    "unchanged",
    "rejected",
    "infra_failed",
    "dead",
    "cancelled",
    "accepted",
];

/// One recorded event.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize, Deserialize)]
pub struct EventRow {
    pub id: i64,
    pub run: String,
    pub session: i64,
    pub attempt: i64,
    pub kind: String,
    pub payload: String,
    pub at_ms: i64,
}

/// An event to record: its kind and JSON payload.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: String,
    pub payload: serde_json::Value,
}

impl NewEvent {
    pub fn new(kind: &str, payload: serde_json::Value) -> Self {
        Self {
            kind: kind.to_string(),
            payload,
        }
    }

    pub fn ledger(event: &run_state::Event) -> Self {
        Self::new(
            LEDGER,
            serde_json::to_value(event).unwrap_or(serde_json::Value::Null),
        )
    }
}

/// The kind of the ledger's events.
pub const LEDGER: &str = "ledger";

/// A session attempt's fields written as it goes (`None`: left as is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionUpdate {
    pub state: Option<String>,
    pub flags: Option<String>,
    pub base: Option<String>,
    pub candidate: Option<String>,
    pub merged: Option<String>,
    pub verdict: Option<String>,
    pub verified_delta: Option<String>,
    pub outcome: Option<String>,
    pub cost_usd: Option<f64>,
    pub accounting: Option<String>,
    pub transcript: Option<String>,
    pub error: Option<String>,
    pub ended: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("run {run}: a recorded ledger event does not read ({reason})")]
    BadEvent { run: String, reason: String },
    #[error("run {run}: its events are out of order: {source}")]
    OutOfOrder {
        run: String,
        #[source]
        source: run_state::OutOfOrder,
    },
    #[error("auto run {id}: no such run in this queue (see `anvil auto status`)")]
    NoSuchRun { id: String },
}

const SESSION_COLUMNS: &str = "run, session, attempt, kind, state, flags, base, candidate, \
     merged, verdict, verified_delta, outcome, cost_usd, accounting, transcript, worker, error, \
     started_at_ms, ended_at_ms";

/// The fence: no newer attempt of the same session exists.
const NO_NEWER: &str = "NOT EXISTS (SELECT 1 FROM auto_sessions n WHERE n.run = $1 \
     AND n.session = $2 AND n.attempt > $3)";

impl Db {
    pub async fn auto_create_run(&self, row: &RunRow) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO auto_runs (id, created_at_ms, repository, spec_path, \
             spec_digest, contract_digest, accepted_commit, start_commit, max_sessions, \
             max_cost_usd, allow_regressions, max_steps, session_timeout_s, model, data_dir, \
             state, terminal_reason, cancel_requested, hold_workers) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(&row.id)
            .bind(row.created_at_ms)
            .bind(&row.repository)
            .bind(&row.spec_path)
            .bind(&row.spec_digest)
            .bind(&row.contract_digest)
            .bind(&row.accepted_commit)
            .bind(&row.start_commit)
            .bind(row.max_sessions)
            .bind(row.max_cost_usd)
            .bind(row.allow_regressions)
            .bind(row.max_steps)
            .bind(row.session_timeout_s)
            .bind(&row.model)
            .bind(&row.data_dir)
            .bind(&row.state)
            .bind(&row.terminal_reason)
            .bind(row.cancel_requested)
            .bind(row.hold_workers)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("recording auto run {}", row.id)))
    }

    pub async fn auto_run(&self, id: &str) -> Result<Option<RunRow>, QueueError> {
        const SQL: &str = "SELECT * FROM auto_runs WHERE id = $1";
        on_pool!(self, pool => sqlx::query_as(SQL).bind(id).fetch_optional(pool).await)
            .map_err(QueueError::sql(format!("reading auto run {id}")))
    }

    /// Every run, newest first.
    pub async fn auto_runs(&self) -> Result<Vec<RunRow>, QueueError> {
        const SQL: &str = "SELECT * FROM auto_runs ORDER BY created_at_ms DESC, id DESC";
        on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await)
            .map_err(QueueError::sql("listing auto runs"))
    }

    /// The unfinished run of `spec_digest` in `repository`, if there is one.
    pub async fn auto_unfinished_run(
        &self,
        repository: &str,
        spec_digest: &str,
    ) -> Result<Option<RunRow>, QueueError> {
        const SQL: &str = "SELECT * FROM auto_runs WHERE repository = $1 AND spec_digest = $2 \
             AND state = 'running' ORDER BY created_at_ms DESC LIMIT 1";
        on_pool!(self, pool => sqlx::query_as(SQL)
            .bind(repository)
            .bind(spec_digest)
            .fetch_optional(pool)
            .await)
        .map_err(QueueError::sql("looking for an unfinished auto run"))
    }

    /// Records the accepted contract.
    pub async fn auto_accept_contract(
        &self,
        run: &str,
        contract_digest: &str,
        accepted_commit: &str,
    ) -> Result<(), QueueError> {
        const SQL: &str =
            "UPDATE auto_runs SET contract_digest = $2, accepted_commit = $3 WHERE id = $1";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(contract_digest)
            .bind(accepted_commit)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("recording the contract of {run}")))
    }

    /// Ends the run in `terminal` (only a running one).
    pub async fn auto_finish_run(
        &self,
        run: &str,
        terminal: Terminal,
        reason: &str,
    ) -> Result<(), QueueError> {
        const SQL: &str = "UPDATE auto_runs SET state = $2, terminal_reason = $3 \
             WHERE id = $1 AND state = 'running'";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(terminal.name())
            .bind(reason)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("ending auto run {run}")))
    }

    /// Makes a limited run running again with new limits (a resume).
    pub async fn auto_reopen_run(
        &self,
        run: &str,
        max_sessions: Option<i64>,
        max_cost_usd: Option<f64>,
    ) -> Result<(), QueueError> {
        const SQL: &str = "UPDATE auto_runs SET state = 'running', terminal_reason = NULL, \
             max_sessions = COALESCE($2, max_sessions), max_cost_usd = COALESCE($3, max_cost_usd) \
             WHERE id = $1";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(max_sessions)
            .bind(max_cost_usd)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("resuming auto run {run}")))
    }

    /// Holds (`true`) or releases the run's worker sessions; see [`RunRow::hold_workers`].
    pub async fn auto_hold_workers(&self, run: &str, hold: bool) -> Result<(), QueueError> {
        const SQL: &str = "UPDATE auto_runs SET hold_workers = $2 WHERE id = $1";
        on_pool!(self, pool => sqlx::query(SQL).bind(run).bind(i64::from(hold)).execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!(
            "holding the workers of auto run {run}"
        )))
    }

    pub async fn auto_request_cancel(&self, run: &str) -> Result<bool, QueueError> {
        const SQL: &str = "UPDATE auto_runs SET cancel_requested = 1 WHERE id = $1";
        on_pool!(self, pool => sqlx::query(SQL).bind(run).execute(pool).await
            .map(|r| r.rows_affected() == 1))
        .map_err(QueueError::sql(format!("cancelling auto run {run}")))
    }

    /// Every attempt of every session of `run`, in order.
    pub async fn auto_sessions(&self, run: &str) -> Result<Vec<SessionRow>, QueueError> {
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM auto_sessions WHERE run = $1 ORDER BY session, attempt"
        ));
        on_pool!(self, pool => sqlx::query_as(sql).bind(run).fetch_all(pool).await)
            .map_err(QueueError::sql(format!("reading the sessions of {run}")))
    }

    /// Takes `session` of `run` for `attempt`: only when no attempt as new or newer exists
    /// and the session has not ended (a redelivered job of a finished session runs nothing).
    /// False when it was not taken.
    pub async fn auto_claim(
        &self,
        run: &str,
        session: u32,
        attempt: u32,
        kind: &str,
        worker: &str,
    ) -> Result<bool, QueueError> {
        const SQL: &str = "INSERT INTO auto_sessions (run, session, attempt, kind, state, flags, \
             worker, started_at_ms) SELECT $1, $2, $3, $4, 'running', '', $5, $6 \
             WHERE NOT EXISTS (SELECT 1 FROM auto_sessions n WHERE n.run = $1 AND n.session = $2 \
             AND (n.attempt >= $3 OR n.state IN ('merged', 'not_merged', 'unchanged', \
             'rejected', 'accepted', 'cancelled')))";
        let n = on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(i64::from(session))
            .bind(i64::from(attempt))
            .bind(kind)
            .bind(worker)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
        .map_err(QueueError::sql(format!(
            "claiming {run} s{session}a{attempt}"
        )))?;
        Ok(n == 1)
    }

    /// Marks every earlier attempt of `session` that has not ended `dead` (its worker is gone:
    /// a newer attempt holds the session). Returns their attempt numbers.
    pub async fn auto_mark_dead(
        &self,
        run: &str,
        session: u32,
        attempt: u32,
    ) -> Result<Vec<i64>, QueueError> {
        const LIVE: &str = "SELECT attempt FROM auto_sessions WHERE run = $1 AND session = $2 \
             AND attempt < $3 AND state NOT IN ('merged', 'not_merged', 'unchanged', 'rejected', \
             'infra_failed', 'dead', 'cancelled', 'accepted') ORDER BY attempt";
        const MARK: &str = "UPDATE auto_sessions SET state = 'dead', ended_at_ms = $4 \
             WHERE run = $1 AND session = $2 AND attempt = $3";
        let context = format!("marking the dead attempts of {run} s{session}");
        on_pool!(self, pool => {
            let live: Vec<i64> = sqlx::query_scalar(LIVE)
                .bind(run)
                .bind(i64::from(session))
                .bind(i64::from(attempt))
                .fetch_all(pool)
                .await
                .map_err(QueueError::sql(context.clone()))?;
            for a in &live {
                sqlx::query(MARK)
                    .bind(run)
                    .bind(i64::from(session))
                    .bind(*a)
                    .bind(now_ms())
                    .execute(pool)
                    .await
                    .map_err(QueueError::sql(context.clone()))?;
            }
            Ok(live)
        })
    }

    /// Records what a dead attempt cost (read from its transcript), once: only a `dead` row
    /// whose cost is not recorded yet.
    pub async fn auto_dead_cost(
        &self,
        run: &str,
        session: u32,
        attempt: u32,
        cost_usd: f64,
    ) -> Result<(), QueueError> {
        const SQL: &str = "UPDATE auto_sessions SET cost_usd = $4, accounting = 'reported' \
             WHERE run = $1 AND session = $2 AND attempt = $3 AND state = 'dead' \
             AND cost_usd IS NULL";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(i64::from(session))
            .bind(i64::from(attempt))
            .bind(cost_usd)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!(
            "recording the cost of {run} s{session}a{attempt}"
        )))
    }

    /// Writes `update` to the attempt and records `events` with it, in one transaction, only
    /// while it is the session's newest attempt and has not ended. False when fenced off.
    pub async fn auto_update(
        &self,
        run: &str,
        session: u32,
        attempt: u32,
        update: &SessionUpdate,
        events: &[NewEvent],
    ) -> Result<bool, QueueError> {
        let sql = sqlx::AssertSqlSafe(format!(
            "UPDATE auto_sessions SET state = COALESCE($4, state), flags = COALESCE($5, flags), \
             base = COALESCE($6, base), candidate = COALESCE($7, candidate), \
             merged = COALESCE($8, merged), verdict = COALESCE($9, verdict), \
             verified_delta = COALESCE($10, verified_delta), outcome = COALESCE($11, outcome), \
             cost_usd = COALESCE($12, cost_usd), accounting = COALESCE($13, accounting), \
             transcript = COALESCE($14, transcript), error = COALESCE($15, error), \
             ended_at_ms = CASE WHEN $16 = 1 THEN $17 ELSE ended_at_ms END \
             WHERE run = $1 AND session = $2 AND attempt = $3 AND state NOT IN \
             ('merged', 'not_merged', 'unchanged', 'rejected', 'infra_failed', 'dead', \
             'cancelled', 'accepted') AND {NO_NEWER}"
        ));
        const EVENT: &str = "INSERT INTO auto_events (run, session, attempt, kind, payload, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        let context = format!("recording {run} s{session}a{attempt}");
        let now = now_ms();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await.map_err(QueueError::sql(context.clone()))?;
            let n = sqlx::query(sql)
                .bind(run)
                .bind(i64::from(session))
                .bind(i64::from(attempt))
                .bind(&update.state)
                .bind(&update.flags)
                .bind(&update.base)
                .bind(&update.candidate)
                .bind(&update.merged)
                .bind(&update.verdict)
                .bind(&update.verified_delta)
                .bind(&update.outcome)
                .bind(update.cost_usd)
                .bind(&update.accounting)
                .bind(&update.transcript)
                .bind(&update.error)
                .bind(i64::from(update.ended))
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(QueueError::sql(context.clone()))?
                .rows_affected();
            if n != 1 {
                tx.rollback().await.map_err(QueueError::sql(context.clone()))?;
                return Ok(false);
            }
            for event in events {
                sqlx::query(EVENT)
                    .bind(run)
                    .bind(i64::from(session))
                    .bind(i64::from(attempt))
                    .bind(&event.kind)
                    .bind(event.payload.to_string())
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(QueueError::sql(context.clone()))?;
            }
            tx.commit().await.map_err(QueueError::sql(context.clone()))?;
            Ok(true)
        })
    }

    /// Records events outside any attempt (a cancel of a run with no session running).
    pub async fn auto_record(
        &self,
        run: &str,
        session: u32,
        attempt: u32,
        event: &NewEvent,
    ) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO auto_events (run, session, attempt, kind, payload, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        on_pool!(self, pool => sqlx::query(SQL)
            .bind(run)
            .bind(i64::from(session))
            .bind(i64::from(attempt))
            .bind(&event.kind)
            .bind(event.payload.to_string())
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(QueueError::sql(format!("recording an event of {run}")))
    }

    /// Every event of `run`, in the order recorded.
    pub async fn auto_events(&self, run: &str) -> Result<Vec<EventRow>, QueueError> {
        const SQL: &str = "SELECT id, run, session, attempt, kind, payload, at_ms \
             FROM auto_events WHERE run = $1 ORDER BY id";
        on_pool!(self, pool => sqlx::query_as(SQL).bind(run).fetch_all(pool).await)
            .map_err(QueueError::sql(format!("reading the events of {run}")))
    }

    /// The run's ledger, replayed from its recorded ledger events.
    pub async fn auto_ledger(&self, run: &str) -> Result<Ledger, StoreError> {
        let events = self.auto_events(run).await?;
        let mut parsed = Vec::new();
        for e in events.iter().filter(|e| e.kind == LEDGER) {
            let event: run_state::Event =
                serde_json::from_str(&e.payload).map_err(|err| StoreError::BadEvent {
                    run: run.to_string(),
                    reason: err.to_string(),
                })?;
            parsed.push(event);
        }
        Ledger::replay(&parsed).map_err(|source| StoreError::OutOfOrder {
            run: run.to_string(),
            source,
        })
    }
}
