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

/// Interns names, remembering the last one (consecutive records usually share task and model).
#[derive(Default)]
struct Interner {
    names: Vec<String>,
    ids: HashMap<String, u32>,
    last: Option<u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(last) = self.last
            && self.names[last as usize] == name
        {
            return last;
        }
        let id = intern(&mut self.names, &mut self.ids, name);
        self.last = Some(id);
        id
    }
}

/// What one reader produced from its part of the input.
#[derive(Default)]
struct Part {
    tasks: Interner,
    models: Interner,
    rows: Vec<Row>,
    infra: Vec<(u32, u32, u32, String)>,
    lines: usize,
}

impl Part {
    /// Parses complete lines from `text`; `first_line` numbers them for errors.
    fn parse(
        &mut self,
        text: &str,
        source_name: &str,
        first_line: usize,
    ) -> Result<(), RecordError> {
        for (i, line) in text.split('\n').enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let r = parse_line(line, source_name, first_line + i)?;
            let task = self.tasks.id(&r.task);
            let model = self.models.id(&r.model);
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
}

/// Reads `[start, end)` of `file` (both at line starts) in blocks and parses it.
fn read_part(
    file: &std::fs::File,
    start: u64,
    end: u64,
    source_name: &str,
) -> (Part, Result<(), RecordError>) {
    use std::os::unix::fs::FileExt;
    const BLOCK: usize = 8 << 20;
    let mut part = Part::default();
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK + 4096);
    let mut carry: Vec<u8> = Vec::new();
    let mut pos = start;
    while pos < end {
        let want = BLOCK.min((end - pos) as usize);
        buf.clear();
        buf.extend_from_slice(&carry);
        let have = buf.len();
        buf.resize(have + want, 0);
        let n = match file.read_at(&mut buf[have..], pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let err = RecordError {
                    source_name: source_name.to_string(),
                    line: part.lines + 1,
                    reason: format!("cannot read: {e}"),
                };
                return (part, Err(err));
            }
        };
        buf.truncate(have + n);
        pos += n as u64;
        // Parse up to the last complete line; carry the rest.
        let cut = if pos >= end {
            buf.len()
        } else {
            buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
        };
        carry = buf[cut..].to_vec();
        let text = match std::str::from_utf8(&buf[..cut]) {
            Ok(t) => t,
            Err(e) => {
                let line = part.lines
                    + 1
                    + buf[..e.valid_up_to()]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count();
                let err = RecordError {
                    source_name: source_name.to_string(),
                    line,
                    reason: "not valid UTF-8".into(),
                };
                return (part, Err(err));
            }
        };
        let first = part.lines + 1;
        if let Err(e) = part.parse(text, source_name, first) {
            return (part, Err(e));
        }
        part.lines += text.matches('\n').count();
    }
    (part, Ok(()))
}

impl Trials {
    /// Reads JSONL; a malformed line is an error naming its line number. Blank lines are skipped.
    pub fn read(mut reader: impl BufRead, source_name: &str) -> Result<Trials, RecordError> {
        let mut text = String::new();
        reader.read_to_string(&mut text).map_err(|e| RecordError {
            source_name: source_name.to_string(),
            line: 1,
            reason: format!("cannot read: {e}"),
        })?;
        let mut part = Part::default();
        part.parse(&text, source_name, 1)?;
        let mut t = Trials::default();
        t.merge(part);
        t.dedupe();
        Ok(t)
    }

    /// Reads a JSONL file with one reader per core, each on its own part of the file.
    pub fn read_file(path: &std::path::Path) -> Result<Trials, RecordError> {
        use std::os::unix::fs::FileExt;
        let source_name = path.display().to_string();
        let fail = |reason: String| RecordError {
            source_name: source_name.clone(),
            line: 0,
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| fail(format!("cannot read: {e}")))?
            .len();
        let parts = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8) as u64;
        // Part boundaries moved forward to the next line start.
        let mut bounds = vec![0u64];
        for i in 1..parts {
            let mut at = len * i / parts;
            let mut byte = [0u8; 4096];
            loop {
                let n = file
                    .read_at(&mut byte, at)
                    .map_err(|e| fail(format!("cannot read: {e}")))?;
                if n == 0 {
                    at = len;
                    break;
                }
                if let Some(p) = byte[..n].iter().position(|&b| b == b'\n') {
                    at += p as u64 + 1;
                    break;
                }
                at += n as u64;
            }
            bounds.push(at.max(*bounds.last().unwrap_or(&0)));
        }
        bounds.push(len);
        let results: Vec<(Part, Result<(), RecordError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = bounds
                .windows(2)
                .map(|w| {
                    let (start, end, file, name) = (w[0], w[1], &file, source_name.as_str());
                    scope.spawn(move || read_part(file, start, end, name))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (
                            Part::default(),
                            Err(RecordError {
                                source_name: source_name.clone(),
                                line: 0,
                                reason: "a reader thread failed".into(),
                            }),
                        )
                    })
                })
                .collect()
        });
        let mut t = Trials::default();
        let mut lines_before = 0;
        for (part, result) in results {
            if let Err(mut e) = result {
                e.line += lines_before;
                return Err(e);
            }
            lines_before += part.lines;
            t.merge(part);
        }
        t.dedupe();
        Ok(t)
    }

    fn merge(&mut self, part: Part) {
        let task_map: Vec<u32> = part
            .tasks
            .names
            .iter()
            .map(|n| intern(&mut self.tasks, &mut self.task_ids, n))
            .collect();
        let model_map: Vec<u32> = part
            .models
            .names
            .iter()
            .map(|n| intern(&mut self.models, &mut self.model_ids, n))
            .collect();
        self.rows.extend(part.rows.into_iter().map(|r| Row {
            task: task_map[r.task as usize],
            model: model_map[r.model as usize],
            ..r
        }));
        for (m, t, trial, reason) in part.infra {
            if self.infra.len() < MAX_LISTED_INFRA {
                self.infra
                    .push((model_map[m as usize], task_map[t as usize], trial, reason));
            }
        }
    }

    /// A (task, model, trial) seen twice keeps its latest attempt.
    fn dedupe(&mut self) {
        self.rows
            .sort_unstable_by_key(|r| (r.task, r.model, r.trial, r.attempt));
        // After sorting, the latest attempt of a trial is the last of its run.
        let mut keep = Vec::with_capacity(self.rows.len());
        for (i, r) in self.rows.iter().enumerate() {
            let next_same = self
                .rows
                .get(i + 1)
                .is_some_and(|n| (n.task, n.model, n.trial) == (r.task, r.model, r.trial));
            if !next_same {
                keep.push(*r);
            }
        }
        self.rows = keep;
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
            k.sort_unstable();
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
