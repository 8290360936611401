//! Paired comparisons: per arm and metric, the mean over the tasks both sides estimated of
//! (current − reference), with a clustered interval, a verdict only when the interval excludes
//! zero, and the minimum detectable effect of the design.
//!
//! Two comparisons share this: a sweep against a baseline (each arm against the same arm of the
//! baseline, [`against_baseline`]) and the variants of one sweep (each model's variants against
//! its reference variant, [`between_variants`]).
//!
//! A baseline is compared only on tasks whose digests (task.toml, repo/, grader/, dependencies)
//! match the current run's: a task whose grader changed measures something else. The tasks left
//! out are listed with what changed ([`ExcludedTask`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::aggregate::{Arm, ModelStats, model_stats};
use crate::intervals::{Interval, clustered_mean, mean_sd, no_spread, pooled};
use crate::metric::Metric;
use crate::trials::Trials;

/// The power the minimum detectable effect is computed for.
pub const MDE_POWER: f64 = 0.8;

/// A paired per-task difference, for one arm and metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub model: String,
    /// The arm's variant (absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// In a comparison between variants: the variant compared against (the "baseline" side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub metric: Metric,
    pub current: f64,
    pub baseline: f64,
    /// Mean over shared tasks of (current − baseline).
    pub diff: f64,
    /// The 95% interval of `diff`: clustered over the shared tasks; when every task's
    /// difference is the same (no spread, so that interval would have zero width), combined
    /// from each side's pooled-trials Wilson interval ([`pooled_difference`]).
    pub ci: Option<Interval>,
    /// The minimum detectable effect: the smallest true difference this design (these tasks,
    /// their observed spread of differences) would find significant with 80% power at the 5%
    /// level, `(t₀.₉₇₅ + t₀.₈₀) × SE`. `None` with fewer than two shared tasks, or when every
    /// task's difference is the same (no spread to size it from).
    pub mde: Option<f64>,
    pub tasks: usize,
    pub current_trials: u64,
    pub baseline_trials: u64,
    /// `regression` or `improvement` only when the interval excludes zero.
    pub verdict: Verdict,
}

impl Comparison {
    /// The arm's label: `model` or `model [variant]`.
    pub fn label(&self) -> String {
        crate::aggregate::label(&self.model, self.variant.as_deref())
    }
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

/// A task left out of a baseline comparison, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExcludedTask {
    pub task: String,
    /// E.g. `grader/ changed` or `task.toml, repo/ changed`.
    pub reason: String,
}

/// One task's estimate on both sides, and its ids there.
#[derive(Debug, Clone, Copy)]
struct Paired {
    current: f64,
    baseline: f64,
    current_task: u32,
    baseline_task: u32,
}

/// Compares each arm of `current` that the baseline also ran, metric by metric, on the tasks
/// whose digests match. Arms only one side ran, and metrics without a shared task, are left
/// out.
pub(crate) fn against_baseline(
    current: &Trials,
    current_stats: &BTreeMap<Arm, ModelStats>,
    baseline: &Trials,
    metrics: &[Metric],
) -> (Vec<Comparison>, Vec<ExcludedTask>) {
    let excluded = changed_tasks(current, baseline);
    let left_out: BTreeSet<&str> = excluded.iter().map(|e| e.task.as_str()).collect();
    let baseline_stats = model_stats(baseline);
    let mut out = Vec::new();
    for (arm, cur) in current_stats {
        let Some(base) = baseline_stats.get(arm) else {
            continue;
        };
        for &metric in metrics {
            let Some(mut c) = paired(current, cur, baseline, base, metric, &left_out) else {
                continue;
            };
            c.model = arm.model.clone();
            c.variant = arm.variant.clone();
            out.push(c);
        }
    }
    (out, excluded)
}

/// Compares, for each model run with more than one variant, every variant against the
/// reference: `reference` when given (and run), else the arm without a variant, else the
/// variant named `control`, else the first variant by name.
pub(crate) fn between_variants(
    trials: &Trials,
    stats: &BTreeMap<Arm, ModelStats>,
    metrics: &[Metric],
    reference: Option<&str>,
) -> Vec<Comparison> {
    let mut by_model: BTreeMap<&str, Vec<(&Arm, &ModelStats)>> = BTreeMap::new();
    for (arm, s) in stats {
        by_model.entry(&arm.model).or_default().push((arm, s));
    }
    let none = BTreeSet::new();
    let mut out = Vec::new();
    for arms in by_model.values() {
        if arms.len() < 2 {
            continue;
        }
        let Some(&(reference_arm, reference_stats)) = pick_reference(arms, reference) else {
            continue;
        };
        for &(arm, s) in arms {
            if arm == reference_arm {
                continue;
            }
            for &metric in metrics {
                let Some(mut c) = paired(trials, s, trials, reference_stats, metric, &none) else {
                    continue;
                };
                c.model = arm.model.clone();
                c.variant = arm.variant.clone();
                c.reference = Some(
                    reference_arm
                        .variant
                        .clone()
                        .unwrap_or_else(|| "(no variant)".to_string()),
                );
                out.push(c);
            }
        }
    }
    out
}

/// The reference among one model's `arms` (sorted: the arm without a variant first).
fn pick_reference<'a>(
    arms: &'a [(&'a Arm, &'a ModelStats)],
    reference: Option<&str>,
) -> Option<&'a (&'a Arm, &'a ModelStats)> {
    match reference {
        Some(name) => arms
            .iter()
            .find(|(arm, _)| arm.variant.as_deref() == Some(name)),
        None => arms
            .iter()
            .find(|(arm, _)| arm.variant.is_none())
            .or_else(|| {
                arms.iter()
                    .find(|(arm, _)| arm.variant.as_deref() == Some("control"))
            })
            .or_else(|| arms.first()),
    }
}

/// `metric` of `cur` against `base`, paired by task name over the tasks not `left_out`; the
/// arm fields are left for the caller. `None` when no task is shared.
fn paired(
    current: &Trials,
    cur: &ModelStats,
    baseline: &Trials,
    base: &ModelStats,
    metric: Metric,
    left_out: &BTreeSet<&str>,
) -> Option<Comparison> {
    // Pair by task name: ids differ between files.
    let base_by_name: HashMap<&str, (u32, f64)> = base
        .per_task(metric)
        .into_iter()
        .map(|(t, v)| (baseline.tasks.name(t), (t, v)))
        .collect();
    let pairs: Vec<Paired> = cur
        .per_task(metric)
        .into_iter()
        .filter(|(t, _)| !left_out.contains(current.tasks.name(*t)))
        .filter_map(|(t, c)| {
            base_by_name
                .get(current.tasks.name(t))
                .map(|&(baseline_task, b)| Paired {
                    current: c,
                    baseline: b,
                    current_task: t,
                    baseline_task,
                })
        })
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let diffs: Vec<f64> = pairs.iter().map(|p| p.current - p.baseline).collect();
    let ci = if diffs.len() >= 2 && no_spread(&diffs) {
        let side = |stats: &ModelStats, task: fn(&Paired) -> u32, mean: f64| {
            let (c, n) = pairs
                .iter()
                .filter_map(|p| stats.per_task.get(&task(p)))
                .fold((0u64, 0u64), |(c, n), k| {
                    (c + u64::from(k.c), n + u64::from(k.n))
                });
            pooled(metric, c, n, mean).map(|interval| (mean, interval))
        };
        let mean_of = |f: fn(&Paired) -> f64| pairs.iter().map(f).sum::<f64>() / n;
        side(cur, |p| p.current_task, mean_of(|p| p.current))
            .zip(side(base, |p| p.baseline_task, mean_of(|p| p.baseline)))
            .map(|(current, baseline)| pooled_difference(current, baseline))
    } else {
        clustered_mean(&diffs).map(|(_, ci)| ci.clamp(-1.0, 1.0))
    };
    let verdict = match ci {
        None => Verdict::Insufficient,
        Some(ci) if ci.high < 0.0 => Verdict::Regression,
        Some(ci) if ci.low > 0.0 => Verdict::Improvement,
        Some(_) => Verdict::NoSignificantChange,
    };
    Some(Comparison {
        model: String::new(),
        variant: None,
        reference: None,
        metric,
        current: pairs.iter().map(|p| p.current).sum::<f64>() / n,
        baseline: pairs.iter().map(|p| p.baseline).sum::<f64>() / n,
        diff: diffs.iter().sum::<f64>() / n,
        ci,
        mde: mde(&diffs),
        tasks: pairs.len(),
        current_trials: cur.graded,
        baseline_trials: base.graded,
        verdict,
    })
}

/// The 95% interval of `current − baseline` from each side's estimate and interval, by the
/// method of variance estimates recovery (Newcombe 1998, method 10, for two Wilson intervals;
/// Zou & Donner 2008 in general): `d − √((c − c_low)² + (b_high − b)²)` to
/// `d + √((c_high − c)² + (b − b_low)²)`, cut to [−1, 1]. Used when every task's difference is
/// the same, with each side's pooled-trials Wilson interval: it treats the two sides' trials as
/// independent, which ignores the pairing and so errs wide.
pub fn pooled_difference(current: (f64, Interval), baseline: (f64, Interval)) -> Interval {
    let (c, ci) = current;
    let (b, bi) = baseline;
    let d = c - b;
    Interval {
        low: d - ((c - ci.low).powi(2) + (bi.high - b).powi(2)).sqrt(),
        high: d + ((ci.high - c).powi(2) + (b - bi.low).powi(2)).sqrt(),
    }
    .clamp(-1.0, 1.0)
}

/// The minimum detectable effect of a paired design with these per-task differences: at the
/// 5% level (two-sided) with [`MDE_POWER`], `(t₀.₉₇₅ + t_power) × sd / √n` with `n − 1`
/// degrees of freedom. `None` with fewer than two tasks, or when all differences are equal
/// (e.g. every trial failed on both sides): the spread is unknown, not zero.
pub fn mde(diffs: &[f64]) -> Option<f64> {
    if diffs.len() < 2 {
        return None;
    }
    let (_, sd) = mean_sd(diffs);
    if sd.is_nan() || sd <= 0.0 {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, (diffs.len() - 1) as f64).ok()?;
    let se = sd / (diffs.len() as f64).sqrt();
    Some(((t.inverse_cdf(0.975) + t.inverse_cdf(MDE_POWER)) * se).min(1.0))
}

/// For each arm both runs have, a note when the model configurations it ran with differ (the
/// pinned `model_config` digests): the comparison is then of two configurations under one name.
pub(crate) fn changed_configs(current: &Trials, baseline: &Trials) -> Vec<String> {
    let configs = |trials: &Trials| {
        let mut out: BTreeMap<(String, Option<String>), BTreeSet<String>> = BTreeMap::new();
        for row in &trials.rows {
            let arm = (
                trials.models.name(row.key.model).to_string(),
                trials.variant(row.key.variant).map(str::to_string),
            );
            let entry = out.entry(arm).or_default();
            if let Some(c) = row.model_config {
                entry.insert(trials.model_configs.name(c).to_string());
            }
        }
        out
    };
    let (cur, base) = (configs(current), configs(baseline));
    cur.iter()
        .filter_map(|(arm, mine)| {
            let theirs = base.get(arm)?;
            (!mine.is_empty() && !theirs.is_empty() && mine != theirs).then(|| {
                format!(
                    "baseline: {} ran with another model configuration than in the baseline \
                     (model_config digests differ): the comparison is of two configurations \
                     under one name",
                    crate::aggregate::label(&arm.0, arm.1.as_deref())
                )
            })
        })
        .collect()
}

/// Tasks both runs have whose digests differ, with the parts that changed.
fn changed_tasks(current: &Trials, baseline: &Trials) -> Vec<ExcludedTask> {
    let cur = task_digests(current);
    let base = task_digests(baseline);
    let mut out = Vec::new();
    for (task, mine) in &cur {
        let Some(theirs) = base.get(task) else {
            continue;
        };
        if mine == theirs || mine.is_empty() || theirs.is_empty() {
            continue;
        }
        let reason = match (single(mine), single(theirs)) {
            (Some(a), Some(b)) => {
                const PARTS: [&str; 4] = ["task.toml", "repo/", "grader/", "dependencies"];
                let changed: Vec<&str> = a
                    .split(':')
                    .zip(b.split(':'))
                    .zip(PARTS)
                    .filter(|((x, y), _)| x != y)
                    .map(|(_, part)| part)
                    .collect();
                format!(
                    "its {} changed since the baseline (digests differ)",
                    changed.join(", ")
                )
            }
            _ => "it ran on more than one version of the task on one side (digests differ)"
                .to_string(),
        };
        out.push(ExcludedTask {
            task: task.to_string(),
            reason,
        });
    }
    out
}

/// The one element of `set`, if it has exactly one.
fn single<'a>(set: &BTreeSet<&'a str>) -> Option<&'a str> {
    (set.len() == 1)
        .then(|| set.iter().next().copied())
        .flatten()
}

/// Each task's digests (as `task:repo:grader:dependencies`) over the trials that have them.
fn task_digests(trials: &Trials) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for row in &trials.rows {
        let entry = out.entry(trials.tasks.name(row.key.task)).or_default();
        if let Some(d) = row.digest {
            entry.insert(trials.digests.name(d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mde_shrinks_with_more_tasks_and_is_none_for_one() {
        assert_eq!(mde(&[0.1]), None);
        assert_eq!(mde(&[0.0, 0.0, 0.0]), None, "no spread: unknown, never 0");
        let few = mde(&[0.0, 0.5, -0.5, 0.25]).unwrap_or(f64::NAN);
        let many: Vec<f64> = [0.0, 0.5, -0.5, 0.25].repeat(10);
        let many = mde(&many).unwrap_or(f64::NAN);
        assert!(many < few, "{many} < {few}");
        // n = 4, sd = 0.4270: (3.182 + 0.978) × 0.2135 = 0.888 (t with 3 df).
        assert!((few - 0.888).abs() < 0.002, "{few}");
    }
}
