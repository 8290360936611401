//! The queue's history, read back for `anvil-evals sweeps`, `trend` and `report --baseline`:
//! every sweep's trials by state, verdict counts per (sweep, model, variant, task) aggregated in
//! SQL from the `pass` column, each sweep's spend from its records, and the finished sweeps.
//! Portable SQL as in `store.rs`: one text per statement for SQLite and Postgres alike.

use std::borrow::Cow;
use std::collections::BTreeMap;

use anvil_report::trend::TaskCounts;
use futures::TryStreamExt;
use serde::Deserialize;

use super::{Db, QueueError, SweepRow, SweepSummary, TrialState, on_pool};

/// Sweep ids bound into one `IN (…)` list at most (both databases allow far more).
const IN_LIST_CHUNK: usize = 500;

/// A sweep with its trials counted by state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepHistory {
    pub row: SweepRow,
    pub by_state: BTreeMap<TrialState, u64>,
    /// Trials the next round of an adaptive sweep would add when nobody enqueued it (its `run`
    /// stopped between rounds); set by the caller (`crate::jobs::sweep::pending_rounds`).
    pub pending_rounds: u64,
}

impl SweepHistory {
    /// Trials in `state`.
    pub fn get(&self, state: TrialState) -> u64 {
        self.by_state.get(&state).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by_state.values().sum()
    }

    /// Trials not finished: queued, running or retrying, and those a pending adaptive round
    /// would add.
    pub fn unfinished(&self) -> u64 {
        self.by_state
            .iter()
            .filter(|(s, _)| !s.is_terminal())
            .map(|(_, n)| n)
            .sum::<u64>()
            + self.pending_rounds
    }
}

/// What a sweep's finished trials cost, from their records' `cost_usd`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SweepCost {
    /// The sum of the known costs.
    pub usd: f64,
    /// Trials whose cost is known.
    pub known: u64,
    /// Trials that ran but whose cost is unknown (`cost_usd` null, or an unreadable record);
    /// trials the sweep's budget did not admit never ran and are in neither count.
    pub unknown: u64,
}

/// When a sweep was started, as the history shows it: `YYYY-MM-DD HH:MM` (UTC).
pub fn utc_minute(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|_| format!("{ms} ms"))
}

#[derive(sqlx::FromRow)]
struct StateCountRow {
    sweep: String,
    state: String,
    trials: i64,
}

#[derive(sqlx::FromRow)]
struct VerdictRow {
    sweep: String,
    model: String,
    variant: String,
    task: String,
    n: i64,
    c: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct FinishedRow {
    id: String,
    created_at_ms: i64,
}

/// The fields of a record that say what it cost (the rest is skipped, not parsed).
#[derive(Deserialize)]
struct CostView<'a> {
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    pass: Option<bool>,
    #[serde(default)]
    infra_error: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    outcome: Option<Cow<'a, str>>,
}

/// `$first, $first+1, …` for `n` parameters.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_state(s: &str) -> Option<TrialState> {
    TrialState::ALL
        .into_iter()
        .find(|state| state.as_str() == s)
}

impl Db {
    /// Every sweep, newest first, with its trials counted by state (from the (sweep, state)
    /// index alone: no record is read).
    pub async fn history(&self) -> Result<Vec<SweepHistory>, QueueError> {
        const STATES: &str =
            "SELECT sweep, state, COUNT(*) AS trials FROM anvil_trials GROUP BY sweep, state";
        let mut rows = self.sweep_rows().await?;
        rows.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
        let states: Vec<StateCountRow> =
            on_pool!(self, pool => sqlx::query_as(STATES).fetch_all(pool).await)
                .map_err(QueueError::sql("counting the trials of every sweep"))?;
        let mut counts: BTreeMap<String, BTreeMap<TrialState, u64>> = BTreeMap::new();
        for row in states {
            if let Some(state) = parse_state(&row.state) {
                *counts
                    .entry(row.sweep)
                    .or_default()
                    .entry(state)
                    .or_default() += row.trials.max(0) as u64;
            }
        }
        Ok(rows
            .into_iter()
            .map(|row| {
                let by_state = counts.remove(&row.id).unwrap_or_default();
                SweepHistory {
                    row,
                    by_state,
                    pending_rounds: 0,
                }
            })
            .collect())
    }

    /// Graded trials and passes per (sweep, model, variant, task) of `sweeps`, from the `pass`
    /// column (the counted verdict: a tampered trial is a fail; infrastructure failures and
    /// trials the budget did not admit are not graded).
    pub async fn task_counts(&self, sweeps: &[String]) -> Result<Vec<TaskCounts>, QueueError> {
        let mut out = Vec::new();
        for chunk in sweeps.chunks(IN_LIST_CHUNK) {
            // Built from numbered placeholders only: the ids are bound, never spliced.
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT sweep, model, variant, task, COUNT(*) AS n, \
                 SUM(CASE WHEN pass = 1 THEN 1 ELSE 0 END) AS c \
                 FROM anvil_trials WHERE state = 'done' AND pass IS NOT NULL \
                 AND sweep IN ({}) GROUP BY sweep, model, variant, task",
                placeholders(1, chunk.len())
            ));
            let rows: Vec<VerdictRow> = on_pool!(self, pool => {
                let mut query = sqlx::query_as(sql);
                for id in chunk {
                    query = query.bind(id);
                }
                query.fetch_all(pool).await
            })
            .map_err(QueueError::sql("counting the verdicts of sweeps"))?;
            out.extend(rows.into_iter().map(|r| TaskCounts {
                sweep: r.sweep,
                model: r.model,
                variant: r.variant,
                task: r.task,
                n: u32::try_from(r.n.max(0)).unwrap_or(u32::MAX),
                c: u32::try_from(r.c.unwrap_or(0).max(0)).unwrap_or(u32::MAX),
            }));
        }
        Ok(out)
    }

    /// What the finished trials of each of `sweeps` cost, from their records (read as a stream,
    /// each record parsed only for its cost).
    pub async fn sweep_costs(
        &self,
        sweeps: &[String],
    ) -> Result<BTreeMap<String, SweepCost>, QueueError> {
        let mut out: BTreeMap<String, SweepCost> = BTreeMap::new();
        for chunk in sweeps.chunks(IN_LIST_CHUNK) {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT sweep, record FROM anvil_trials \
                 WHERE state IN ('done', 'infra_error') AND record IS NOT NULL AND sweep IN ({})",
                placeholders(1, chunk.len())
            ));
            on_pool!(self, pool => {
                let mut query = sqlx::query_as::<_, (String, String)>(sql);
                for id in chunk {
                    query = query.bind(id);
                }
                let mut rows = query.fetch(pool);
                while let Some((sweep, record)) = rows
                    .try_next()
                    .await
                    .map_err(QueueError::sql("reading the costs of sweeps"))?
                {
                    let cost = out.entry(sweep).or_default();
                    match serde_json::from_str::<CostView>(&record) {
                        Ok(view)
                            if anvil_report::record::not_admitted(
                                view.pass,
                                view.infra_error.is_some(),
                                view.outcome.as_deref(),
                            ) => {}
                        Ok(CostView {
                            cost_usd: Some(usd),
                            ..
                        }) => {
                            cost.usd += usd;
                            cost.known += 1;
                        }
                        _ => cost.unknown += 1,
                    }
                }
            });
        }
        Ok(out)
    }

    /// The trial records of a sweep as one JSONL text, in key order: what
    /// [`Db::records`] returns, streamed into one buffer instead of a string per record (half
    /// the memory of reading a large sweep, and no copy to join them).
    pub async fn records_jsonl(&self, sweep: &str) -> Result<String, QueueError> {
        const SQL: &str = "SELECT record FROM anvil_trials \
             WHERE sweep = $1 AND state IN ('done', 'infra_error') AND record IS NOT NULL \
             ORDER BY task, model, variant, trial";
        let mut text = String::new();
        on_pool!(self, pool => {
            let mut rows = sqlx::query_scalar::<_, String>(SQL).bind(sweep).fetch(pool);
            while let Some(record) = rows
                .try_next()
                .await
                .map_err(QueueError::sql(format!("reading the results of {sweep}")))?
            {
                text.push_str(&record);
                text.push('\n');
            }
        });
        Ok(text)
    }

    /// The finished sweeps, newest first: not cancelled, with trials, none of them queued,
    /// running or retrying.
    pub async fn finished_sweeps(&self) -> Result<Vec<SweepSummary>, QueueError> {
        const SQL: &str = "SELECT s.id, s.created_at_ms FROM anvil_sweeps s \
             WHERE s.cancelled = 0 \
             AND EXISTS (SELECT 1 FROM anvil_trials t WHERE t.sweep = s.id) \
             AND NOT EXISTS (SELECT 1 FROM anvil_trials t WHERE t.sweep = s.id \
             AND t.state IN ('queued', 'running', 'retrying')) \
             ORDER BY s.created_at_ms DESC, s.id DESC";
        let rows: Vec<FinishedRow> =
            on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await)
                .map_err(QueueError::sql("listing finished sweeps"))?;
        Ok(rows
            .into_iter()
            .map(|r| SweepSummary {
                id: r.id,
                created_at_ms: r.created_at_ms,
                cancelled: false,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_from_first() {
        assert_eq!(placeholders(1, 3), "$1, $2, $3");
        assert_eq!(placeholders(2, 1), "$2");
    }

    #[test]
    fn dates_are_utc_minutes() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00");
        assert_eq!(utc_minute(1_796_083_199_000), "2026-11-30 23:59");
    }
}
