//! A sweep's hard budget, held in the queue database so that it holds across every worker on
//! every machine: before its agent runs, a trial reserves its share with one conditional
//! `UPDATE` (admitted only if spent + reserved + share fits the budget; Postgres re-checks the
//! condition under the row lock, SQLite serializes writers), and settles the reservation with
//! the trial's cost afterwards. A reservation whose worker died is kept as spent when the
//! trial's next attempt comes, never forgotten; a trial whose cost came back unknown is
//! charged its whole share.

use super::{Db, QueueError, TrialKey, on_pool};

/// A sweep's budget and what was charged against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepSpend {
    pub max_usd: f64,
    /// Settled: the finished trials' costs (and kept reservations).
    pub spent_usd: f64,
    /// Outstanding: the running trials' shares.
    pub reserved_usd: f64,
}

/// Whether a trial was admitted against its sweep's budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// The sweep has no budget.
    Unbudgeted,
    /// Its share is reserved; its agent runs with the share as its own budget.
    Admitted,
    /// Its share does not fit what is left.
    Refused(SweepSpend),
}

/// Float sums that fit exactly must not be refused for a rounding error.
const EPSILON: f64 = 1e-9;

/// `sqlx::query(sql)` with `key` bound as `$1`..`$5` (sweep, task, model, variant, trial).
macro_rules! keyed {
    ($sql:expr, $key:expr) => {
        sqlx::query($sql)
            .bind(&$key.sweep)
            .bind(&$key.task)
            .bind(&$key.model)
            .bind($key.variant_column())
            .bind(i64::from($key.trial))
    };
}

/// The trial's row, `$1`..`$5` being its key.
macro_rules! trial {
    () => {
        "sweep = $1 AND task = $2 AND model = $3 AND variant = $4 AND trial = $5"
    };
}

/// An earlier attempt's outstanding reservation (its worker died), kept as spent.
const KEEP: &str = concat!(
    "UPDATE anvil_sweep_budgets SET ",
    "spent_usd = spent_usd + (SELECT COALESCE(reserved_usd, 0) FROM anvil_trials WHERE ",
    trial!(),
    "), reserved_usd = reserved_usd - (SELECT COALESCE(reserved_usd, 0) FROM anvil_trials WHERE ",
    trial!(),
    ") WHERE sweep = $1"
);
const CLEAR: &str = concat!(
    "UPDATE anvil_trials SET reserved_usd = NULL WHERE ",
    trial!()
);
/// The share, reserved only if it fits.
const RESERVE: &str = "UPDATE anvil_sweep_budgets SET reserved_usd = reserved_usd + $2 \
     WHERE sweep = $1 AND spent_usd + reserved_usd + $2 <= max_usd + $3";
const MARK: &str = concat!("UPDATE anvil_trials SET reserved_usd = $6 WHERE ", trial!());
/// The trial's reservation settled with its cost (`$6`; NULL keeps the whole share as spent).
const SETTLE: &str = concat!(
    "UPDATE anvil_sweep_budgets SET ",
    "reserved_usd = reserved_usd - (SELECT reserved_usd FROM anvil_trials WHERE ",
    trial!(),
    "), spent_usd = spent_usd + COALESCE($6, (SELECT reserved_usd FROM anvil_trials WHERE ",
    trial!(),
    ")) WHERE sweep = $1 AND EXISTS (SELECT 1 FROM anvil_trials WHERE ",
    trial!(),
    " AND reserved_usd IS NOT NULL)"
);

impl Db {
    /// Sets `sweep`'s budget (a resumed sweep takes the new amount; what was spent stays).
    pub async fn set_sweep_budget(&self, sweep: &str, max_usd: f64) -> Result<(), QueueError> {
        const SQL: &str = "INSERT INTO anvil_sweep_budgets (sweep, max_usd) VALUES ($1, $2) \
             ON CONFLICT (sweep) DO UPDATE SET max_usd = excluded.max_usd";
        on_pool!(self, pool => sqlx::query(SQL).bind(sweep).bind(max_usd).execute(pool).await
            .map(drop))
        .map_err(QueueError::sql(format!("setting the budget of {sweep}")))
    }

    /// `sweep`'s budget and spend, when it has a budget.
    pub async fn sweep_spend(&self, sweep: &str) -> Result<Option<SweepSpend>, QueueError> {
        const SQL: &str = "SELECT max_usd, spent_usd, reserved_usd FROM anvil_sweep_budgets \
             WHERE sweep = $1";
        let row: Option<(f64, f64, f64)> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(sweep).fetch_optional(pool).await)
                .map_err(QueueError::sql(format!("reading the budget of {sweep}")))?;
        Ok(row.map(|(max_usd, spent_usd, reserved_usd)| SweepSpend {
            max_usd,
            spent_usd,
            reserved_usd,
        }))
    }

    /// Reserves `share` USD of `key`'s sweep budget for the trial's attempt about to run. An
    /// earlier attempt's reservation still outstanding (its worker died) is kept as spent first.
    pub async fn admit_trial(&self, key: &TrialKey, share: f64) -> Result<Admission, QueueError> {
        let context = format!("admitting trial {key} against its sweep's budget");
        let Some(before) = self.sweep_spend(&key.sweep).await? else {
            return Ok(Admission::Unbudgeted);
        };
        let admitted = on_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                for sql in [KEEP, CLEAR] {
                    keyed!(sql, key)
                        .execute(&mut *tx)
                        .await?;
                }
                let n = sqlx::query(RESERVE)
                    .bind(&key.sweep)
                    .bind(share)
                    .bind(EPSILON)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 1 {
                    keyed!(MARK, key)
                        .bind(share)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok::<bool, sqlx::Error>(n == 1)
            }
            .await
        })
        .map_err(QueueError::sql(context))?;
        if admitted {
            return Ok(Admission::Admitted);
        }
        Ok(Admission::Refused(
            self.sweep_spend(&key.sweep).await?.unwrap_or(before),
        ))
    }

    /// Settles `key`'s reservation with what the trial cost: `None` (unknown) keeps the whole
    /// share as spent. Nothing happens when the trial holds no reservation.
    pub async fn settle_trial(
        &self,
        key: &TrialKey,
        cost_usd: Option<f64>,
    ) -> Result<(), QueueError> {
        on_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                keyed!(SETTLE, key)
                    .bind(cost_usd)
                    .execute(&mut *tx)
                    .await?;
                keyed!(CLEAR, key)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            }
            .await
        })
        .map_err(QueueError::sql(format!(
            "settling the budget of trial {key}"
        )))
    }
}
