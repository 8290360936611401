//! Aggregation: per (model, task) counts first, then per model the mean over tasks of each
//! metric's per-task estimate, with intervals that treat tasks as the unit. Infrastructure
//! failures are counted apart (never as fails); tampered trials count as graded fails.

use std::collections::{BTreeMap, HashMap};

use serde::{Serialize, Serializer};

use crate::intervals::{Interval, Z95, bootstrap_mean, no_spread, over_tasks, pooled, wilson};
use crate::metric::Metric;
use crate::trials::Trials;

/// Resamples for the bootstrap interval, and its fixed seed.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
pub const BOOTSTRAP_SEED: u64 = 0x0061_6e76_696c; // "anvil"

/// One (model, task) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskCell {
    pub task: String,
    /// Graded trials (infrastructure failures excluded; tampered ones included, as fails).
    pub n: u32,
    /// Passed trials.
    pub c: u32,
    pub infra_errors: u32,
    /// Graded trials whose workspace changed test infrastructure (counted as fails).
    pub tampered: u32,
    pub rate: Option<f64>,
    pub wilson: Option<Interval>,
    /// The cell's trials that have a transcript, by trial number: for the HTML report's
    /// links. Not in the JSON report, which stays a summary whatever the sweep's size (the
    /// records name every transcript).
    #[serde(skip)]
    pub transcripts: Vec<Transcript>,
}

/// A trial's transcript (the agent's session file), for reading how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub trial: u32,
    /// The attempt the report counts (the transcript is that attempt's).
    pub attempt: u32,
    pub result: TrialResult,
    /// As the record names it; a relative one resolved against the results file's directory.
    pub path: String,
}

/// How a trial counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialResult {
    Passed,
    Failed,
    Tampered,
    InfraError,
}

/// One metric for one model: the mean over tasks of the per-task estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricValue {
    /// In the JSON as `"name": "pass^3", "k": 3`.
    #[serde(flatten, serialize_with = "name_and_k")]
    pub metric: Metric,
    pub value: Option<f64>,
    /// Clustered standard error interval (tasks are the clusters); when every task has the same
    /// estimate, the Wilson interval of the pooled trials instead
    /// ([`crate::intervals::over_tasks`]).
    pub ci: Option<Interval>,
    /// Seeded percentile bootstrap over tasks; when every task has the same estimate, the same
    /// pooled Wilson interval as `ci` (a bootstrap of equal values has zero width).
    pub bootstrap_ci: Option<Interval>,
    /// Tasks with at least k graded trials (the others cannot be estimated).
    pub tasks: usize,
}

fn name_and_k<S: Serializer>(metric: &Metric, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct NameAndK {
        name: Metric,
        k: u32,
    }
    NameAndK {
        name: *metric,
        k: metric.k(),
    }
    .serialize(serializer)
}

/// What one line of a report is about: a model, run with a harness variant or without one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arm {
    pub model: String,
    pub variant: Option<String>,
}

impl Arm {
    /// `model`, or `model [variant]`.
    pub fn label(&self) -> String {
        label(&self.model, self.variant.as_deref())
    }
}

/// `model`, or `model [variant]`: how reports name an arm.
pub fn label(model: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{model} [{v}]"),
        None => model.to_string(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelReport {
    pub model: String,
    /// The harness variant (a sweep file's `[variants.NAME]`); absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub tasks: usize,
    pub graded_trials: u64,
    pub infra_errors: u64,
    /// Graded trials whose workspace changed test infrastructure: counted as fails, never as
    /// passes, and listed with their findings in [`crate::summary::Report::tampered`].
    pub tampered: u64,
    /// Trials the sweep's budget did not admit: never run, neither fails nor infrastructure
    /// failures (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub not_admitted: u64,
    pub metrics: Vec<MetricValue>,
    pub mean_steps: Option<f64>,
    /// Mean cost over the trials whose cost is known; `None` when none is.
    pub mean_cost_usd: Option<f64>,
    pub cost_unknown_trials: u64,
    pub p50_duration_ms: Option<u64>,
    pub cells: Vec<TaskCell>,
}

/// One (model, task)'s counts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    /// Graded.
    pub(crate) n: u32,
    /// Passed.
    pub(crate) c: u32,
    pub(crate) infra: u32,
    pub(crate) tampered: u32,
}

/// One model's counts over all its trials, per task and in total.
#[derive(Debug, Default)]
pub(crate) struct ModelStats {
    /// By task id (of the [`Trials`] they came from).
    pub(crate) per_task: BTreeMap<u32, Counts>,
    pub(crate) steps: u64,
    pub(crate) graded: u64,
    pub(crate) infra: u64,
    pub(crate) tampered: u64,
    pub(crate) not_admitted: u64,
    pub(crate) cost_sum: f64,
    pub(crate) cost_known: u64,
    pub(crate) cost_unknown: u64,
    pub(crate) durations: Vec<u64>,
    /// By task id: the trials with a transcript, as (trial, attempt, result, index into
    /// `Trials::sessions`).
    pub(crate) transcripts: BTreeMap<u32, Vec<(u32, u32, TrialResult, u32)>>,
    /// The trials' adaptive design, when they had one ([`Trials::design`]).
    pub(crate) design: Option<crate::adaptive::Design>,
}

/// Counts per arm (model and variant).
pub(crate) fn model_stats(trials: &Trials) -> BTreeMap<Arm, ModelStats> {
    let mut by_model: HashMap<(u32, u32), ModelStats> = HashMap::new();
    for r in &trials.rows {
        let s = by_model
            .entry((r.key.model, r.key.variant))
            .or_insert_with(|| ModelStats {
                design: trials.design,
                ..ModelStats::default()
            });
        if r.not_admitted {
            // Never run: neither graded nor an infrastructure failure, and no cost.
            s.not_admitted += 1;
            continue;
        }
        if let Some(session) = r.session {
            let result = match r.pass {
                None => TrialResult::InfraError,
                Some(_) if r.tampered => TrialResult::Tampered,
                Some(true) => TrialResult::Passed,
                Some(false) => TrialResult::Failed,
            };
            s.transcripts.entry(r.key.task).or_default().push((
                r.key.trial,
                r.attempt,
                result,
                session,
            ));
        }
        let cell = s.per_task.entry(r.key.task).or_default();
        match r.pass {
            None => {
                cell.infra += 1;
                s.infra += 1;
                continue;
            }
            Some(p) => {
                cell.n += 1;
                cell.c += u32::from(p && !r.tampered);
            }
        }
        if r.tampered {
            cell.tampered += 1;
            s.tampered += 1;
        }
        s.graded += 1;
        s.steps += u64::from(r.steps);
        match r.cost {
            Some(c) => {
                s.cost_sum += c;
                s.cost_known += 1;
            }
            None => s.cost_unknown += 1,
        }
        s.durations.push(r.duration_ms);
    }
    by_model
        .into_iter()
        .map(|((model, variant), s)| {
            let arm = Arm {
                model: trials.models.name(model).to_string(),
                variant: trials.variant(variant).map(str::to_string),
            };
            (arm, s)
        })
        .collect()
}

impl ModelReport {
    /// `model`, or `model [variant]`.
    pub fn label(&self) -> String {
        label(&self.model, self.variant.as_deref())
    }
}

impl ModelStats {
    /// The transcripts of `task`'s trials, by trial number.
    fn transcripts(&self, task: u32, trials: &Trials) -> Vec<Transcript> {
        let mut out: Vec<Transcript> = self
            .transcripts
            .get(&task)
            .into_iter()
            .flatten()
            .map(|&(trial, attempt, result, session)| Transcript {
                trial,
                attempt,
                result,
                path: trials.sessions[session as usize].clone(),
            })
            .collect();
        out.sort_by_key(|t| t.trial);
        out
    }

    /// `metric` per task, by task id; tasks with fewer than k graded trials are left out.
    /// Under an adaptive design, the estimate that stays unbiased under its stopping rule (a
    /// count the design cannot end at, e.g. after an infrastructure failure, falls back to the
    /// usual estimator: see [`Trials::design`]).
    pub(crate) fn per_task(&self, metric: Metric) -> BTreeMap<u32, f64> {
        // Past the first round no unbiased estimate exists: none at all (the report says so).
        if self.design.is_some_and(|d| metric.k() > d.round) {
            return BTreeMap::new();
        }
        self.per_task
            .iter()
            .filter(|(_, counts)| counts.n >= metric.k() && counts.n > 0)
            .filter_map(|(&task, counts)| {
                self.design
                    .and_then(|d| d.estimate(metric, counts.n, counts.c))
                    .or_else(|| metric.estimate(counts.n, counts.c).ok())
                    .map(|v| (task, v))
            })
            .collect()
    }

    /// The passed and graded trials, summed over the tasks `metric` is estimated on (those
    /// [`Self::per_task`] keeps): the pooled trials of its fallback interval.
    pub(crate) fn pooled(&self, metric: Metric) -> (u64, u64) {
        let kept = self.per_task(metric);
        kept.keys()
            .filter_map(|task| self.per_task.get(task))
            .fold((0, 0), |(c, n), counts| {
                (c + u64::from(counts.c), n + u64::from(counts.n))
            })
    }

    /// The arm's line of the report; `trials` names its tasks.
    pub(crate) fn report(&self, arm: &Arm, metrics: &[Metric], trials: &Trials) -> ModelReport {
        let mut durations = self.durations.clone();
        let p50 = (!durations.is_empty()).then(|| {
            let mid = durations.len() / 2;
            *durations.select_nth_unstable(mid).1
        });
        let cells = self
            .per_task
            .iter()
            .map(
                |(
                    &task,
                    &Counts {
                        n,
                        c,
                        infra,
                        tampered,
                    },
                )| TaskCell {
                    task: trials.tasks.name(task).to_string(),
                    n,
                    c,
                    infra_errors: infra,
                    tampered,
                    rate: (n > 0).then(|| f64::from(c) / f64::from(n)),
                    wilson: wilson(c.into(), n.into(), Z95),
                    transcripts: self.transcripts(task, trials),
                },
            )
            .collect();
        ModelReport {
            model: arm.model.clone(),
            variant: arm.variant.clone(),
            tasks: self.per_task.len(),
            graded_trials: self.graded,
            infra_errors: self.infra,
            tampered: self.tampered,
            not_admitted: self.not_admitted,
            metrics: metrics
                .iter()
                .map(|&m| {
                    let (passed, graded) = self.pooled(m);
                    mean_over_tasks(m, &self.per_task(m), passed, graded)
                })
                .collect(),
            mean_steps: (self.graded > 0).then(|| self.steps as f64 / self.graded as f64),
            mean_cost_usd: (self.cost_known > 0).then(|| self.cost_sum / self.cost_known as f64),
            cost_unknown_trials: self.cost_unknown,
            p50_duration_ms: p50,
            cells,
        }
    }
}

/// `metric`'s mean over the tasks of `per_task` with its intervals; `passed` of `graded` are
/// those tasks' pooled trials, for the fallback when every task has the same estimate.
fn mean_over_tasks(
    metric: Metric,
    per_task: &BTreeMap<u32, f64>,
    passed: u64,
    graded: u64,
) -> MetricValue {
    let v: Vec<f64> = per_task.values().copied().collect();
    let value = (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let ci = over_tasks(metric, &v, passed, graded);
    let bootstrap_ci = match value {
        Some(mean) if v.len() >= 2 && no_spread(&v) => pooled(metric, passed, graded, mean),
        _ => bootstrap_mean(&v, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED),
    };
    MetricValue {
        metric,
        value,
        ci,
        bootstrap_ci,
        tasks: v.len(),
    }
}

/// The trials run per task: the most trials with a record in one (sweep, task, model, variant)
/// — or, for an adaptive sweep, its first round, beyond which no k can be estimated. What
/// [`crate::metric::default_ks`] is given when no k is asked for; 0 without a trial.
pub fn trials_per_task(trials: &Trials) -> u32 {
    if let Some(design) = trials.design() {
        return design.round;
    }
    let mut cells: HashMap<(u32, u32, u32, u32), u32> = HashMap::new();
    for r in &trials.rows {
        *cells
            .entry((r.key.sweep, r.key.task, r.key.model, r.key.variant))
            .or_default() += 1;
    }
    cells.into_values().max().unwrap_or(0)
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}
