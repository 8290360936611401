//! What the queue remembers: `sweeps` (every sweep, newest first, with its shape, state,
//! headline pass@1 per arm and spend) and `trend` (a metric across the sweeps matching a
//! pattern, oldest first, as a table, JSON or an HTML chart).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anvil_report::Metric;
use anvil_report::trend::{self, Estimate, SweepMeta};
use anvil_runner::jobs::queue::{SweepCost, SweepHistory, TrialState, utc_minute};
use anvil_runner::jobs::sweep::SweepSpec;
use anyhow::{Context, Result, anyhow, bail};

use crate::sweeps::open_existing;

/// A glob over sweep ids (`nightly-*`, `sweep-202612??-*`); `flag` names the option in errors.
pub fn sweep_glob(pattern: &str, flag: &str) -> Result<globset::GlobMatcher> {
    if pattern.trim().is_empty() {
        bail!("{flag}: the pattern is empty (give a glob over sweep ids, such as 'nightly-*')");
    }
    // globset's error repeats the pattern ("error parsing glob 'x[': …"): only its kind is
    // said, and the pattern only when the flag does not hold it already.
    globset::Glob::new(pattern)
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            let what = if flag.contains(pattern) {
                "not a glob".to_string()
            } else {
                format!("'{pattern}' is not a glob")
            };
            anyhow!("{flag}: {what} over sweep ids: {}", e.kind())
        })
}

// ---- sweeps ------------------------------------------------------------------------------

/// The shape a sweep was asked for.
#[derive(Debug, Clone)]
struct Shape {
    tasks: usize,
    models: usize,
    /// 1 for a sweep without variants (it runs one arm per model).
    variants: usize,
    trials: u32,
}

/// One arm's headline pass@1.
#[derive(Debug, Clone)]
struct Headline {
    model: String,
    variant: Option<String>,
    estimate: Estimate,
}

/// One sweep's arms: (model, variant) → each task's (graded, passed).
type Arms<'a> = BTreeMap<(&'a str, &'a str), Vec<(u32, u32)>>;

/// A line of `sweeps`.
#[derive(Debug, Clone)]
struct Listed {
    id: String,
    created_at_ms: i64,
    date: String,
    /// `None` when the stored spec cannot be read.
    shape: Option<Shape>,
    /// `running`, `queued`, `finished` or `cancelled`.
    state: &'static str,
    /// Trials by state (every state, zeros included).
    trials: BTreeMap<&'static str, u64>,
    pass_at_1: Vec<Headline>,
    /// The sum of the known costs (0 with none known; null in the JSON).
    cost_usd: f64,
    cost_known_trials: u64,
    cost_unknown_trials: u64,
}

/// `db.history()` with each adaptive sweep's pending round counted.
async fn history_of(db: &anvil_runner::jobs::queue::Db) -> Result<Vec<SweepHistory>> {
    let mut history = db.history().await?;
    for h in &mut history {
        h.pending_rounds = anvil_runner::jobs::sweep::pending_rounds(db, &h.row)
            .await
            .unwrap_or(0) as u64;
    }
    Ok(history)
}

fn state_of(h: &SweepHistory) -> &'static str {
    if h.row.cancelled {
        "cancelled"
    } else if h.pending_rounds > 0 && h.unfinished() == h.pending_rounds {
        // An adaptive sweep whose `run` stopped between rounds: `run --sweep ID` resumes it.
        "rounds pending"
    } else if h.get(TrialState::Running) > 0 {
        "running"
    } else if h.unfinished() > 0 {
        "queued"
    } else {
        "finished"
    }
}

fn listed(h: &SweepHistory, headlines: Vec<Headline>, cost: SweepCost) -> Listed {
    let shape = SweepSpec::from_row(&h.row).ok().map(|spec| Shape {
        tasks: spec.tasks.len(),
        models: spec.models.len(),
        // A sweep without variants runs one arm per model.
        variants: spec.variants.len().max(1),
        trials: spec.trials,
    });
    Listed {
        id: h.row.id.clone(),
        created_at_ms: h.row.created_at_ms,
        date: utc_minute(h.row.created_at_ms),
        shape,
        state: state_of(h),
        trials: TrialState::ALL
            .iter()
            .map(|s| (s.as_str(), h.get(*s)))
            .collect(),
        pass_at_1: headlines,
        cost_usd: cost.usd,
        cost_known_trials: cost.known,
        cost_unknown_trials: cost.unknown,
    }
}

fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Listed {
    fn shape_text(&self) -> String {
        match &self.shape {
            Some(s) => format!(
                "{} × {} × {} × {}",
                plural(s.tasks as u64, "task", "tasks"),
                plural(s.models as u64, "model", "models"),
                plural(s.variants as u64, "variant", "variants"),
                plural(s.trials, "trial", "trials")
            ),
            None => "(spec unreadable)".into(),
        }
    }

    fn state_text(&self) -> String {
        let get = |s: TrialState| self.trials.get(s.as_str()).copied().unwrap_or(0);
        let total: u64 = self.trials.values().sum();
        let finished =
            get(TrialState::Done) + get(TrialState::InfraError) + get(TrialState::Cancelled);
        let mut text = format!("{} {finished}/{total}", self.state);
        for (state, one, many) in [
            (TrialState::Running, "running", "running"),
            (TrialState::Queued, "queued", "queued"),
            (TrialState::Retrying, "retrying", "retrying"),
            (TrialState::InfraError, "infra error", "infra errors"),
            (TrialState::Cancelled, "cancelled", "cancelled"),
        ] {
            let n = get(state);
            if n > 0 {
                text.push_str(&format!(", {}", plural(n, one, many)));
            }
        }
        text
    }

    fn pass_text(&self) -> String {
        if self.pass_at_1.is_empty() {
            return "—".into();
        }
        self.pass_at_1
            .iter()
            .map(|h| {
                let arm = anvil_report::aggregate::label(&h.model, h.variant.as_deref());
                let value = h
                    .estimate
                    .value
                    .map_or_else(|| "—".to_string(), |v| format!("{:.1}%", v * 100.0));
                format!("{arm} {value}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The line as JSON.
    fn json(&self) -> serde_json::Value {
        use serde_json::json;
        let pass: Vec<serde_json::Value> = self
            .pass_at_1
            .iter()
            .map(|h| {
                json!({
                    "model": h.model,
                    "variant": h.variant,
                    "value": h.estimate.value,
                    "ci": h.estimate.ci.map(|ci| json!({"low": ci.low, "high": ci.high})),
                    "tasks": h.estimate.tasks,
                    "graded_trials": h.estimate.graded_trials,
                })
            })
            .collect();
        json!({
            "id": self.id,
            "created_at_ms": self.created_at_ms,
            "date": self.date,
            "shape": self.shape.as_ref().map(|s| json!({
                "tasks": s.tasks,
                "models": s.models,
                "variants": s.variants,
                "trials": s.trials,
            })),
            "state": self.state,
            "trials": self.trials,
            "pass_at_1": pass,
            "cost_usd": (self.cost_known_trials > 0).then_some(self.cost_usd),
            "cost_known_trials": self.cost_known_trials,
            "cost_unknown_trials": self.cost_unknown_trials,
        })
    }

    fn cost_text(&self) -> String {
        match (self.cost_known_trials, self.cost_unknown_trials) {
            (0, 0) => "—".into(),
            (0, u) => format!("unknown ({u} trials)"),
            (_, 0) => format!("${:.4}", self.cost_usd),
            (_, u) => format!("${:.4} (+{u} unknown)", self.cost_usd),
        }
    }
}

/// Columns padded to their widest cell (counted in characters).
fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The adaptive design a sweep was started with, if any (a spec this version cannot read has
/// none it knows of).
fn design_of(row: &anvil_runner::jobs::queue::SweepRow) -> Option<anvil_report::adaptive::Design> {
    anvil_runner::jobs::sweep::SweepSpec::from_row(row)
        .ok()
        .and_then(|spec| spec.adaptive)
}

/// `anvil-evals sweeps`.
pub async fn sweeps(queue: Option<&str>, json: bool, limit: Option<usize>) -> Result<ExitCode> {
    let (db, location) = open_existing(queue, 2).await?;
    let mut history = history_of(&db).await?;
    if let Some(limit) = limit {
        history.truncate(limit);
    }
    let ids: Vec<String> = history.iter().map(|h| h.row.id.clone()).collect();
    let counts = db.task_counts(&ids).await?;
    let costs = db.sweep_costs(&ids).await?;
    // sweep → (model, variant) → [(n, c)]
    let mut arms: BTreeMap<&str, Arms> = BTreeMap::new();
    for c in &counts {
        arms.entry(c.sweep.as_str())
            .or_default()
            .entry((c.model.as_str(), c.variant.as_str()))
            .or_default()
            .push((c.n, c.c));
    }
    let listed: Vec<Listed> = history
        .iter()
        .map(|h| {
            let headlines = arms
                .get(h.row.id.as_str())
                .into_iter()
                .flatten()
                .map(|(&(model, variant), tasks)| Headline {
                    model: model.to_string(),
                    variant: (!variant.is_empty()).then(|| variant.to_string()),
                    estimate: trend::estimate(
                        Metric::PassAt(1),
                        design_of(&h.row),
                        tasks.iter().copied(),
                    ),
                })
                .collect();
            listed(
                h,
                headlines,
                costs.get(&h.row.id).copied().unwrap_or_default(),
            )
        })
        .collect();
    if json {
        let list: Vec<serde_json::Value> = listed.iter().map(Listed::json).collect();
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "schema": "anvil-sweeps/1",
            "sweeps": list,
        }))
        .context("writing the list as JSON")?;
        out!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        out!("no sweeps in {location}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![vec![
        "sweep".to_string(),
        "started (UTC)".into(),
        "shape".into(),
        "state (finished/trials)".into(),
        "pass@1".into(),
        "cost".into(),
    ]];
    for l in &listed {
        rows.push(vec![
            l.id.clone(),
            l.date.clone(),
            l.shape_text(),
            l.state_text(),
            l.pass_text(),
            l.cost_text(),
        ]);
    }
    out_raw!("{}", columns(&rows));
    Ok(ExitCode::SUCCESS)
}

// ---- trend -------------------------------------------------------------------------------

/// How `trend` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TrendFormat {
    Table,
    Json,
    Html,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TrendArgs {
    /// A glob over sweep ids, such as 'nightly-*' (quote it for the shell).
    pub pattern: String,
    /// The queue (default: anvil.db in the data dir).
    #[arg(long)]
    pub queue: Option<String>,
    /// The metric: pass@K or pass^K.
    #[arg(long, default_value = "pass@1")]
    pub metric: String,
    #[arg(long, value_enum, default_value_t = TrendFormat::Table)]
    pub format: TrendFormat,
    /// Write to this file (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// `anvil-evals trend`.
pub async fn trend(args: TrendArgs) -> Result<ExitCode> {
    // Bad input is refused before the queue is opened.
    let metric: Metric = args
        .metric
        .parse()
        .map_err(|e: String| anyhow!("--metric: {e}"))?;
    let glob = sweep_glob(&args.pattern, "trend PATTERN")?;
    let (db, location) = open_existing(args.queue.as_deref(), 2).await?;
    let history = history_of(&db).await?;
    let matched: Vec<&SweepHistory> = history
        .iter()
        .filter(|h| glob.is_match(&h.row.id))
        .collect();
    if matched.is_empty() {
        bail!(
            "no sweep in {location} matches '{}' (`anvil-evals sweeps` lists them)",
            args.pattern
        );
    }
    let metas: Vec<SweepMeta> = matched
        .iter()
        .map(|h| SweepMeta {
            id: h.row.id.clone(),
            created_at_ms: h.row.created_at_ms,
            date: utc_minute(h.row.created_at_ms),
            cancelled: h.row.cancelled,
            unfinished: h.unfinished(),
            design: design_of(&h.row),
        })
        .collect();
    let ids: Vec<String> = metas.iter().map(|m| m.id.clone()).collect();
    let counts = db.task_counts(&ids).await?;
    let t = trend::trend(&metas, &counts, metric);
    if t.sweeps.is_empty() {
        eprintln!(
            "anvil-evals: none of the {} sweeps matching '{}' has a graded trial yet",
            matched.len(),
            args.pattern
        );
    }
    let mut text = match args.format {
        TrendFormat::Table => trend::table(&t),
        TrendFormat::Json => trend::json(&t),
        TrendFormat::Html => trend::html(&t),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    match &args.output {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => out_raw!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters() {
        let rows = vec![
            vec!["a".to_string(), "× b".into(), "c".into()],
            vec!["long".to_string(), "x".into(), "".into()],
        ];
        assert_eq!(columns(&rows), "a     × b  c\nlong  x\n");
    }

    #[test]
    fn globs_match_sweep_ids() {
        let g = sweep_glob("nightly-*", "trend").unwrap();
        assert!(g.is_match("nightly-2026-12-01") && !g.is_match("weekly-1"));
        assert!(sweep_glob("nightly-[", "trend").is_err());
        assert!(sweep_glob(" ", "trend").is_err());
    }
}
