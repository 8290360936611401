//! From trial records to a [`Report`]: per-task counts first, then per-model means over tasks
//! with intervals, infrastructure failures and tampered trials apart, and an optional paired
//! baseline comparison.
//!
//! One trial is one (sweep, task, model, trial) key. A key seen more than once with different
//! attempts keeps its highest attempt (an infrastructure retry supersedes the earlier try) and
//! the report says so in its notes; the same key twice with the *same* attempt is refused, naming
//! both lines: a results file holds one record per attempt, so it was most likely concatenated
//! twice, and counting either copy would be a guess.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::Serialize;

use crate::estimators::{pass_at_k, pass_hat_k};
use crate::intervals::{Interval, Z95, bootstrap_mean, clustered_mean, wilson};
use crate::record::{RecordError, TamperFinding, parse_line};

/// Resamples for the bootstrap interval, and its fixed seed.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
pub const BOOTSTRAP_SEED: u64 = 0x0061_6e76_696c; // "anvil"

/// One trial, reduced to what the report needs.
#[derive(Debug, Clone, Copy)]
struct Row {
    sweep: u32,
    task: u32,
    model: u32,
    trial: u32,
    attempt: u32,
    /// `None`: an infrastructure failure. A tampered trial is `Some(false)`.
    pass: Option<bool>,
    tampered: bool,
    steps: u32,
    cost: Option<f64>,
    duration_ms: u64,
    /// The line of the results file it came from (1-based).
    line: usize,
    /// Index into `Trials::details` (infrastructure failures and tampered trials).
    detail: Option<u32>,
}

/// What a report lists about a trial beyond its counts.
#[derive(Debug, Clone)]
enum Detail {
    Infra(String),
    Tampered(Vec<TamperFinding>),
}

/// All trials of one or more results files.
#[derive(Debug, Default)]
pub struct Trials {
    source_name: String,
    sweeps: Vec<String>,
    tasks: Vec<String>,
    models: Vec<String>,
    sweep_ids: HashMap<String, u32>,
    task_ids: HashMap<String, u32>,
    model_ids: HashMap<String, u32>,
    rows: Vec<Row>,
    details: Vec<Detail>,
    notes: Vec<String>,
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
/// Tampered trials listed one by one, with their findings (the count is always complete).
pub const MAX_LISTED_TAMPERED: usize = 200;
/// Superseded attempts named one by one in the notes (the count is always complete).
pub const MAX_LISTED_SUPERSEDED: usize = 20;

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
    sweeps: Interner,
    tasks: Interner,
    models: Interner,
    rows: Vec<Row>,
    details: Vec<Detail>,
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
            let number = first_line + i;
            let r = parse_line(line, source_name, number)?;
            let sweep = self.sweeps.id(&r.sweep);
            let task = self.tasks.id(&r.task);
            let model = self.models.id(&r.model);
            let tampered = r.tampered();
            // parse_line guarantees: pass is null exactly when infra_error is set.
            let detail = match (&r.infra_error, tampered) {
                (Some(reason), _) => Some(Detail::Infra(reason.to_string())),
                (None, true) => Some(Detail::Tampered(r.tamper.clone())),
                (None, false) => None,
            };
            let detail = detail.map(|d| {
                self.details.push(d);
                (self.details.len() - 1) as u32
            });
            self.rows.push(Row {
                sweep,
                task,
                model,
                trial: r.trial,
                attempt: r.attempt,
                pass: if tampered { Some(false) } else { r.pass },
                tampered,
                steps: r.steps,
                cost: r.cost_usd,
                duration_ms: r.duration_ms,
                line: number,
                detail,
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
        let mut t = Trials {
            source_name: source_name.to_string(),
            ..Trials::default()
        };
        t.merge(part, 0);
        t.dedupe()?;
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
        let mut t = Trials {
            source_name: source_name.clone(),
            ..Trials::default()
        };
        let mut lines_before = 0;
        for (part, result) in results {
            if let Err(mut e) = result {
                e.line += lines_before;
                return Err(e);
            }
            let lines = part.lines;
            t.merge(part, lines_before);
            lines_before += lines;
        }
        t.dedupe()?;
        Ok(t)
    }

    /// Adds a part's rows; its line numbers start after `lines_before`.
    fn merge(&mut self, part: Part, lines_before: usize) {
        let sweep_map: Vec<u32> = part
            .sweeps
            .names
            .iter()
            .map(|n| intern(&mut self.sweeps, &mut self.sweep_ids, n))
            .collect();
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
        let details_before = self.details.len() as u32;
        self.details.extend(part.details);
        self.rows.extend(part.rows.into_iter().map(|r| Row {
            sweep: sweep_map[r.sweep as usize],
            task: task_map[r.task as usize],
            model: model_map[r.model as usize],
            line: r.line + lines_before,
            detail: r.detail.map(|d| d + details_before),
            ..r
        }));
    }

    /// `sweep/task/model#trial`, as the queue names a trial.
    fn key_name(&self, r: &Row) -> String {
        format!(
            "{}/{}/{}#{}",
            self.sweeps[r.sweep as usize],
            self.tasks[r.task as usize],
            self.models[r.model as usize],
            r.trial
        )
    }

    /// One row per (sweep, task, model, trial): the highest attempt, with a note naming what it
    /// superseded. The same key twice with the same attempt is an error naming both lines.
    fn dedupe(&mut self) -> Result<(), RecordError> {
        let key = |r: &Row| (r.sweep, r.task, r.model, r.trial);
        self.rows
            .sort_unstable_by_key(|r| (r.sweep, r.task, r.model, r.trial, r.attempt, r.line));
        let mut keep = Vec::with_capacity(self.rows.len());
        let mut superseded = 0usize;
        let mut listed = Vec::new();
        let mut start = 0;
        while start < self.rows.len() {
            let mut end = start + 1;
            while end < self.rows.len() && key(&self.rows[end]) == key(&self.rows[start]) {
                end += 1;
            }
            let group = &self.rows[start..end];
            for pair in group.windows(2) {
                if pair[0].attempt == pair[1].attempt {
                    return Err(RecordError {
                        source_name: self.source_name.clone(),
                        line: pair[1].line,
                        reason: format!(
                            "trial {} attempt {} is also on line {}: a results file holds one record per attempt (was it concatenated twice?)",
                            self.key_name(&pair[1]),
                            pair[1].attempt,
                            pair[0].line
                        ),
                    });
                }
            }
            let last = group[group.len() - 1];
            if group.len() > 1 {
                superseded += 1;
                if listed.len() < MAX_LISTED_SUPERSEDED {
                    let attempts: Vec<String> = group
                        .iter()
                        .map(|r| format!("{} (line {})", r.attempt, r.line))
                        .collect();
                    listed.push(format!(
                        "{}: attempts {}; kept attempt {}",
                        self.key_name(&last),
                        attempts.join(", "),
                        last.attempt
                    ));
                }
            }
            keep.push(last);
            start = end;
        }
        self.rows = keep;
        if superseded > 0 {
            let source = &self.source_name;
            self.notes.push(format!(
                "{source}: {superseded} trial(s) appear with several attempts; each counts once, with its highest attempt"
            ));
            for line in listed {
                self.notes.push(format!("{source}: {line}"));
            }
            if superseded > MAX_LISTED_SUPERSEDED {
                self.notes.push(format!(
                    "{source}: … and {} more trial(s) with several attempts",
                    superseded - MAX_LISTED_SUPERSEDED
                ));
            }
        }
        Ok(())
    }

    /// What the reader had to decide about its input (e.g. superseded attempts), for a person.
    pub fn notes(&self) -> &[String] {
        &self.notes
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
    /// Graded trials (infrastructure failures excluded; tampered ones included, as fails).
    pub n: u32,
    /// Passed trials.
    pub c: u32,
    pub infra_errors: u32,
    /// Graded trials whose workspace changed test infrastructure (counted as fails).
    pub tampered: u32,
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
    /// Graded trials whose workspace changed test infrastructure: counted as fails, never as
    /// passes, and listed with their findings in [`Report::tampered`].
    pub tampered: u64,
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

/// A trial whose workspace changed test infrastructure, with what the grader found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TamperedTrial {
    pub model: String,
    pub task: String,
    pub trial: u32,
    pub findings: Vec<TamperFinding>,
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
    /// Tampered trials over all models (each counted as a fail).
    pub tampered_total: u64,
    /// The first [`MAX_LISTED_TAMPERED`] tampered trials with their findings.
    pub tampered: Vec<TamperedTrial>,
    /// What the reader decided about its input (e.g. superseded attempts), for a person.
    pub notes: Vec<String>,
    pub baseline: Option<Vec<Comparison>>,
}

pub const REPORT_SCHEMA: &str = "anvil-report/1";

/// One (model, task)'s counts.
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    /// Graded.
    n: u32,
    /// Passed.
    c: u32,
    infra: u32,
    tampered: u32,
}

struct ModelStats {
    per_task: BTreeMap<u32, Cell>,
    steps: u64,
    graded: u64,
    infra: u64,
    tampered: u64,
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
            tampered: 0,
            cost_sum: 0.0,
            cost_known: 0,
            cost_unknown: 0,
            durations: Vec::new(),
        });
        let cell = s.per_task.entry(r.task).or_default();
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
        .map(|(id, s)| (trials.models[id as usize].clone(), s))
        .collect()
}

/// Per-task values of a metric (tasks with fewer than k graded trials are left out).
fn per_task_values(stats: &ModelStats, name: &str, k: u32) -> BTreeMap<u32, f64> {
    stats
        .per_task
        .iter()
        .filter(|(_, cell)| cell.n >= k && cell.n > 0)
        .filter_map(|(&task, &Cell { n, c, .. })| {
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
            .map(
                |(
                    &task,
                    &Cell {
                        n,
                        c,
                        infra,
                        tampered,
                    },
                )| TaskCell {
                    task: trials.tasks[task as usize].clone(),
                    n,
                    c,
                    infra_errors: infra,
                    tampered,
                    rate: (n > 0).then(|| f64::from(c) / f64::from(n)),
                    wilson: wilson(c.into(), n.into(), Z95),
                },
            )
            .collect();
        models.push(ModelReport {
            model: model.clone(),
            tasks: s.per_task.len(),
            graded_trials: s.graded,
            infra_errors: s.infra,
            tampered: s.tampered,
            metrics,
            mean_steps: (s.graded > 0).then(|| s.steps as f64 / s.graded as f64),
            mean_cost_usd: (s.cost_known > 0).then(|| s.cost_sum / s.cost_known as f64),
            cost_unknown_trials: s.cost_unknown,
            p50_duration_ms: p50,
            cells,
        });
    }
    let detail = |r: &Row| r.detail.and_then(|d| trials.details.get(d as usize));
    let infra_errors = trials
        .rows
        .iter()
        .filter_map(|r| match detail(r) {
            Some(Detail::Infra(reason)) if r.pass.is_none() => Some(InfraError {
                model: trials.models[r.model as usize].clone(),
                task: trials.tasks[r.task as usize].clone(),
                trial: r.trial,
                reason: reason.clone(),
            }),
            _ => None,
        })
        .take(MAX_LISTED_INFRA)
        .collect();
    let tampered = trials
        .rows
        .iter()
        .filter_map(|r| match detail(r) {
            Some(Detail::Tampered(findings)) if r.tampered => Some(TamperedTrial {
                model: trials.models[r.model as usize].clone(),
                task: trials.tasks[r.task as usize].clone(),
                trial: r.trial,
                findings: findings.clone(),
            }),
            _ => None,
        })
        .take(MAX_LISTED_TAMPERED)
        .collect();
    let mut notes = trials.notes.clone();
    if let Some(b) = baseline {
        notes.extend(b.notes.iter().map(|n| format!("baseline: {n}")));
    }
    Report {
        schema: REPORT_SCHEMA,
        k: {
            let mut k: Vec<u32> = names.iter().map(|(_, k)| *k).collect();
            k.sort_unstable();
            k.dedup();
            k
        },
        infra_errors_total: stats.values().map(|s| s.infra).sum(),
        tampered_total: stats.values().map(|s| s.tampered).sum(),
        models,
        infra_errors,
        tampered,
        notes,
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
