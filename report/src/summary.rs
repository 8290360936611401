//! From trial records to a [`Report`]: per-task counts first, then per-model means over tasks
//! with intervals, infrastructure failures apart, and an optional paired baseline comparison.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::Serialize;

use crate::estimators::{pass_at_k, pass_hat_k};
use crate::intervals::{Interval, Z95, bootstrap_mean, clustered_mean, wilson};
use crate::record::{RecordError, parse_line};

/// Resamples for the bootstrap interval, and its fixed seed.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
pub const BOOTSTRAP_SEED: u64 = 0x0061_6e76_696c; // "anvil"

/// One trial, reduced to what the report needs.
#[derive(Debug, Clone, Copy)]
struct Row {
    task: u32,
    model: u32,
    trial: u32,
    attempt: u32,
    /// `None`: an infrastructure failure.
    pass: Option<bool>,
    steps: u32,
    cost: Option<f64>,
    duration_ms: u64,
}

/// All trials of one or more results files.
#[derive(Debug, Default)]
pub struct Trials {
    tasks: Vec<String>,
    models: Vec<String>,
    task_ids: HashMap<String, u32>,
    model_ids: HashMap<String, u32>,
    rows: Vec<Row>,
    infra: Vec<(u32, u32, u32, String)>,
}

fn intern(names: &mut Vec<String>, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    let id = names.len() as u32;
    names.push(name.to_string());
    ids.insert(name.to_string(), id);
    id
}

/// Infrastructure failures listed one by one in a report (the count is always complete).
pub const MAX_LISTED_INFRA: usize = 200;

impl Trials {
    /// Reads JSONL; a malformed line is an error naming its line number. Blank lines are skipped.
    pub fn read(reader: impl BufRead, source_name: &str) -> Result<Trials, RecordError> {
        let mut t = Trials::default();
        t.extend(reader, source_name)?;
        t.dedupe();
        Ok(t)
    }

    fn extend(&mut self, mut reader: impl BufRead, source_name: &str) -> Result<(), RecordError> {
        let mut line = String::new();
        let mut number = 0;
        loop {
            line.clear();
            number += 1;
            let n = reader.read_line(&mut line).map_err(|e| RecordError {
                source_name: source_name.to_string(),
                line: number,
                reason: format!("cannot read: {e}"),
            })?;
            if n == 0 {
                break;
            }
            let text = line.trim_end();
            if text.is_empty() {
                continue;
            }
            let r = parse_line(text, source_name, number)?;
            let task = intern(&mut self.tasks, &mut self.task_ids, &r.task);
            let model = intern(&mut self.models, &mut self.model_ids, &r.model);
            if let (None, Some(reason)) = (r.pass, &r.infra_error)
                && self.infra.len() < MAX_LISTED_INFRA
            {
                self.infra.push((model, task, r.trial, reason.to_string()));
            }
            self.rows.push(Row {
                task,
                model,
                trial: r.trial,
                attempt: r.attempt,
                pass: if r.infra_error.is_some() {
                    None
                } else {
                    r.pass
                },
                steps: r.steps,
                cost: r.cost_usd,
                duration_ms: r.duration_ms,
            });
        }
        Ok(())
    }

    /// A (task, model, trial) seen twice keeps its latest attempt.
    fn dedupe(&mut self) {
        let mut latest: HashMap<(u32, u32, u32), usize> = HashMap::with_capacity(self.rows.len());
        let mut duplicates = false;
        for (i, r) in self.rows.iter().enumerate() {
            match latest.entry((r.task, r.model, r.trial)) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(i);
                }
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    duplicates = true;
                    if self.rows[*o.get()].attempt <= r.attempt {
                        o.insert(i);
                    }
                }
            }
        }
        if duplicates {
            let mut keep: Vec<usize> = latest.into_values().collect();
            keep.sort_unstable();
            self.rows = keep.into_iter().map(|i| self.rows[i]).collect();
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// One (model, task) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskCell {
    pub task: String,
    /// Graded trials (infrastructure failures excluded).
    pub n: u32,
    /// Passed trials.
    pub c: u32,
    pub infra_errors: u32,
    pub rate: Option<f64>,
    pub wilson: Option<Interval>,
}

/// A per-model metric: the mean over tasks of a per-task estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    pub name: String,
    pub k: u32,
    pub value: Option<f64>,
    /// Clustered standard error interval (tasks are the clusters).
    pub ci: Option<Interval>,
    /// Seeded percentile bootstrap over tasks.
    pub bootstrap_ci: Option<Interval>,
    /// Tasks with at least k graded trials (the others cannot be estimated).
    pub tasks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelReport {
    pub model: String,
    pub tasks: usize,
    pub graded_trials: u64,
    pub infra_errors: u64,
    pub metrics: Vec<Metric>,
    pub mean_steps: Option<f64>,
    /// Mean cost over the trials whose cost is known; `None` when none is.
    pub mean_cost_usd: Option<f64>,
    pub cost_unknown_trials: u64,
    pub p50_duration_ms: Option<u64>,
    pub cells: Vec<TaskCell>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InfraError {
    pub model: String,
    pub task: String,
    pub trial: u32,
    pub reason: String,
}

/// A paired per-task difference against the baseline, for one model and metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub model: String,
    pub metric: String,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `anvil-report/1`: the JSON layout's version.
    pub schema: &'static str,
    pub k: Vec<u32>,
    pub models: Vec<ModelReport>,
    pub infra_errors_total: u64,
    pub infra_errors: Vec<InfraError>,
    pub baseline: Option<Vec<Comparison>>,
}

pub const REPORT_SCHEMA: &str = "anvil-report/1";

struct ModelStats {
    per_task: BTreeMap<u32, (u32, u32, u32)>, // task → (n, c, infra)
    steps: u64,
    graded: u64,
    infra: u64,
    cost_sum: f64,
    cost_known: u64,
    cost_unknown: u64,
    durations: Vec<u64>,
}

fn model_stats(trials: &Trials) -> BTreeMap<String, ModelStats> {
    let mut by_model: HashMap<u32, ModelStats> = HashMap::new();
    for r in &trials.rows {
        let s = by_model.entry(r.model).or_insert_with(|| ModelStats {
            per_task: BTreeMap::new(),
            steps: 0,
            graded: 0,
            infra: 0,
            cost_sum: 0.0,
            cost_known: 0,
            cost_unknown: 0,
            durations: Vec::new(),
        });
        let cell = s.per_task.entry(r.task).or_insert((0, 0, 0));
        match r.pass {
            None => {
                cell.2 += 1;
                s.infra += 1;
                continue;
            }
            Some(p) => {
                cell.0 += 1;
                cell.1 += u32::from(p);
            }
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
        .map(|(id, s)| (trials.models[id as usize].clone(), s))
        .collect()
}

/// Per-task values of a metric (tasks with fewer than k graded trials are left out).
fn per_task_values(stats: &ModelStats, name: &str, k: u32) -> BTreeMap<u32, f64> {
    stats
        .per_task
        .iter()
        .filter(|(_, (n, _, _))| *n >= k && *n > 0)
        .filter_map(|(&task, &(n, c, _))| {
            let v = if name.starts_with("pass^") {
                pass_hat_k(n, c, i64::from(k))
            } else {
                pass_at_k(n, c, i64::from(k))
            };
            v.ok().map(|v| (task, v))
        })
        .collect()
}

fn metric_names(ks: &[u32]) -> Vec<(String, u32)> {
    let mut ks: Vec<u32> = ks.to_vec();
    ks.sort_unstable();
    ks.dedup();
    let mut names = vec![("pass@1".to_string(), 1)];
    for &k in ks.iter().filter(|&&k| k > 1) {
        names.push((format!("pass@{k}"), k));
    }
    for &k in ks.iter().filter(|&&k| k > 1) {
        names.push((format!("pass^{k}"), k));
    }
    names
}

fn metric(name: &str, k: u32, values: &BTreeMap<u32, f64>) -> Metric {
    let v: Vec<f64> = values.values().copied().collect();
    let value = (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Metric {
        name: name.to_string(),
        k,
        value,
        ci: clustered_mean(&v).map(|(_, ci)| ci.clamp(0.0, 1.0)),
        bootstrap_ci: bootstrap_mean(&v, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED),
        tasks: v.len(),
    }
}

/// Builds the report. `ks` are the k of pass@k / pass^k (pass@1 is always included).
pub fn report(trials: &Trials, ks: &[u32], baseline: Option<&Trials>) -> Report {
    let names = metric_names(ks);
    let stats = model_stats(trials);
    let mut models = Vec::new();
    for (model, s) in &stats {
        let metrics = names
            .iter()
            .map(|(name, k)| metric(name, *k, &per_task_values(s, name, *k)))
            .collect();
        let mut durations = s.durations.clone();
        let p50 = (!durations.is_empty()).then(|| {
            let mid = durations.len() / 2;
            *durations.select_nth_unstable(mid).1
        });
        let cells = s
            .per_task
            .iter()
            .map(|(&task, &(n, c, infra))| TaskCell {
                task: trials.tasks[task as usize].clone(),
                n,
                c,
                infra_errors: infra,
                rate: (n > 0).then(|| f64::from(c) / f64::from(n)),
                wilson: wilson(c.into(), n.into(), Z95),
            })
            .collect();
        models.push(ModelReport {
            model: model.clone(),
            tasks: s.per_task.len(),
            graded_trials: s.graded,
            infra_errors: s.infra,
            metrics,
            mean_steps: (s.graded > 0).then(|| s.steps as f64 / s.graded as f64),
            mean_cost_usd: (s.cost_known > 0).then(|| s.cost_sum / s.cost_known as f64),
            cost_unknown_trials: s.cost_unknown,
            p50_duration_ms: p50,
            cells,
        });
    }
    let infra_errors = trials
        .infra
        .iter()
        .map(|(m, t, trial, reason)| InfraError {
            model: trials.models[*m as usize].clone(),
            task: trials.tasks[*t as usize].clone(),
            trial: *trial,
            reason: reason.clone(),
        })
        .collect();
    Report {
        schema: REPORT_SCHEMA,
        k: {
            let mut k: Vec<u32> = names.iter().map(|(_, k)| *k).collect();
            k.dedup();
            k
        },
        infra_errors_total: stats.values().map(|s| s.infra).sum(),
        models,
        infra_errors,
        baseline: baseline.map(|b| compare(trials, &stats, b, &names)),
    }
}

fn compare(
    current: &Trials,
    current_stats: &BTreeMap<String, ModelStats>,
    baseline: &Trials,
    names: &[(String, u32)],
) -> Vec<Comparison> {
    let baseline_stats = model_stats(baseline);
    let mut out = Vec::new();
    for (model, cur) in current_stats {
        let Some(base) = baseline_stats.get(model) else {
            continue;
        };
        for (name, k) in names {
            let cv = per_task_values(cur, name, *k);
            let bv = per_task_values(base, name, *k);
            // Pair by task name: ids differ between files.
            let bv_by_name: HashMap<&str, f64> = bv
                .iter()
                .map(|(&t, &v)| (baseline.tasks[t as usize].as_str(), v))
                .collect();
            let pairs: Vec<(f64, f64)> = cv
                .iter()
                .filter_map(|(&t, &c)| {
                    bv_by_name
                        .get(current.tasks[t as usize].as_str())
                        .map(|&b| (c, b))
                })
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let n = pairs.len() as f64;
            let diffs: Vec<f64> = pairs.iter().map(|(c, b)| c - b).collect();
            let ci = clustered_mean(&diffs).map(|(_, ci)| ci.clamp(-1.0, 1.0));
            let verdict = match ci {
                None => Verdict::Insufficient,
                Some(ci) if ci.high < 0.0 => Verdict::Regression,
                Some(ci) if ci.low > 0.0 => Verdict::Improvement,
                Some(_) => Verdict::NoSignificantChange,
            };
            out.push(Comparison {
                model: model.clone(),
                metric: name.clone(),
                current: pairs.iter().map(|p| p.0).sum::<f64>() / n,
                baseline: pairs.iter().map(|p| p.1).sum::<f64>() / n,
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
