//! Baseline comparison: per model and metric, the mean over the tasks both runs estimated of
//! (current − baseline), with a clustered interval; a verdict only when the interval excludes
//! zero.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::aggregate::{ModelStats, model_stats};
use crate::intervals::{Interval, clustered_mean};
use crate::metric::Metric;
use crate::trials::Trials;

/// A paired per-task difference against the baseline, for one model and metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub model: String,
    pub metric: Metric,
    pub current: f64,
    pub baseline: f64,
    /// Mean over shared tasks of (current − baseline).
    pub diff: f64,
    pub ci: Option<Interval>,
    pub tasks: usize,
    pub current_trials: u64,
    pub baseline_trials: u64,
    /// `regression` or `improvement` only when the interval excludes zero.
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regression,
    Improvement,
    NoSignificantChange,
    /// Fewer than two shared tasks: nothing can be said.
    Insufficient,
}

/// One task's estimate in both runs.
#[derive(Debug, Clone, Copy)]
struct Paired {
    current: f64,
    baseline: f64,
}

/// Compares each model of `current` that the baseline also ran, metric by metric. Models only
/// one side ran, and metrics without a shared task, are left out.
pub(crate) fn compare(
    current: &Trials,
    current_stats: &BTreeMap<String, ModelStats>,
    baseline: &Trials,
    metrics: &[Metric],
) -> Vec<Comparison> {
    let baseline_stats = model_stats(baseline);
    let mut out = Vec::new();
    for (model, cur) in current_stats {
        let Some(base) = baseline_stats.get(model) else {
            continue;
        };
        for &metric in metrics {
            // Pair by task name: ids differ between files.
            let base_by_name: HashMap<&str, f64> = base
                .per_task(metric)
                .into_iter()
                .map(|(t, v)| (baseline.tasks.name(t), v))
                .collect();
            let pairs: Vec<Paired> = cur
                .per_task(metric)
                .into_iter()
                .filter_map(|(t, c)| {
                    base_by_name.get(current.tasks.name(t)).map(|&b| Paired {
                        current: c,
                        baseline: b,
                    })
                })
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let n = pairs.len() as f64;
            let diffs: Vec<f64> = pairs.iter().map(|p| p.current - p.baseline).collect();
            let ci = clustered_mean(&diffs).map(|(_, ci)| ci.clamp(-1.0, 1.0));
            let verdict = match ci {
                None => Verdict::Insufficient,
                Some(ci) if ci.high < 0.0 => Verdict::Regression,
                Some(ci) if ci.low > 0.0 => Verdict::Improvement,
                Some(_) => Verdict::NoSignificantChange,
            };
            out.push(Comparison {
                model: model.clone(),
                metric,
                current: pairs.iter().map(|p| p.current).sum::<f64>() / n,
                baseline: pairs.iter().map(|p| p.baseline).sum::<f64>() / n,
                diff: diffs.iter().sum::<f64>() / n,
                ci,
                tasks: pairs.len(),
                current_trials: cur.graded,
                baseline_trials: base.graded,
                verdict,
            });
        }
    }
    out
}
